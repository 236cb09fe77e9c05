//! Weights & Biases CSV exports: `Step` plus `<run> - <metric>` columns (with `__MIN`/`__MAX`
//! companions), several runs side by side.

use std::path::Path;

use super::{ReadError, parse_num, read_bytes, to_step};
use crate::series::RawRun;

/// True when a header line looks like a W&B export: `__MIN`/`__MAX` companions, or a `Step`
/// column (quoted or not) followed only by `<run> - <metric>` columns.
pub fn is_wandb_header(line: &str) -> bool {
    if !line.contains(" - ") {
        return false;
    }
    if line.contains("__MIN") || line.contains("__MAX") {
        return true;
    }
    let mut cols = line.split(',').map(|c| c.trim().trim_matches('"'));
    cols.next() == Some("Step") && cols.all(|c| c.contains(" - "))
}

/// Reads a W&B CSV export into one run per W&B run.
pub fn read(path: &Path) -> Result<Vec<RawRun>, ReadError> {
    let bytes = read_bytes(path)?;
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(bytes.as_slice());
    let mut runs: Vec<RawRun> = Vec::new();
    // Column -> (run index, metric name).
    let mut cols: Vec<Option<(usize, String)>> = Vec::new();
    let mut step_col = 0usize;
    for (i, rec) in rdr.records().enumerate() {
        let line = i + 1;
        let rec = rec.map_err(|e| ReadError::Parse {
            path: path.to_path_buf(),
            line,
            field: "row".to_string(),
            reason: e.to_string(),
        })?;
        if i == 0 {
            for (j, h) in rec.iter().enumerate() {
                let h = h.trim();
                let lower = h.to_ascii_lowercase();
                if matches!(lower.as_str(), "step" | "_step" | "trainer/global_step") {
                    step_col = j;
                    cols.push(None);
                    continue;
                }
                let Some((run, metric)) = h.split_once(" - ") else {
                    cols.push(None);
                    continue;
                };
                let idx = match runs.iter().position(|r| r.name == run) {
                    Some(k) => k,
                    None => {
                        runs.push(RawRun::new(run, path.display().to_string(), "wandb_csv"));
                        runs.len() - 1
                    }
                };
                cols.push(Some((idx, metric.to_string())));
            }
            continue;
        }
        let Some(step) = rec.get(step_col).and_then(parse_num) else {
            continue;
        };
        let step = to_step(step);
        for (j, cell) in rec.iter().enumerate() {
            let Some(Some((r, metric))) = cols.get(j) else {
                continue;
            };
            if cell.trim().is_empty() {
                continue;
            }
            if let Some(x) = parse_num(cell)
                && let Some(run) = runs.get_mut(*r)
            {
                run.push(metric, step, x);
            }
        }
    }
    Ok(runs)
}
