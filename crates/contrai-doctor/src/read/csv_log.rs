//! Lightning CSVLogger `metrics.csv` (sparse rows), Keras CSVLogger (`NA` for missing, runs
//! appended without a header), and any CSV with a step/epoch column and metric columns.

use std::path::Path;

use super::{ReadError, parse_num, read_bytes, to_step};
use crate::series::{Marker, RawRun, XUnit};
use crate::tags;

/// Column that carries the x-axis, and its unit.
fn step_column(header: &[String]) -> Option<(usize, XUnit)> {
    let lower: Vec<String> = header.iter().map(|h| h.trim().to_ascii_lowercase()).collect();
    for key in [
        "step",
        "global_step",
        "trainer/global_step",
        "_step",
        "iteration",
        "iter",
    ] {
        if let Some(i) = lower.iter().position(|h| h == key) {
            return Some((i, XUnit::Step));
        }
    }
    lower.iter().position(|h| h == "epoch").map(|i| (i, XUnit::Epoch))
}

/// Reads a CSV log.
pub fn read(path: &Path) -> Result<RawRun, ReadError> {
    let bytes = read_bytes(path)?;
    let delim = {
        let first = bytes.split(|b| *b == b'\n').next().unwrap_or(&[]);
        if !first.contains(&b',') && first.contains(&b'\t') {
            b'\t'
        } else {
            b','
        }
    };
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delim)
        .from_reader(bytes.as_slice());
    let name = path
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let mut run = RawRun::new(name, path.display().to_string(), "csv");
    let mut header: Option<Vec<String>> = None;
    let mut step_col: Option<(usize, XUnit)> = None;
    let mut metric_cols: Vec<(usize, String)> = Vec::new();
    let mut row_index: u64 = 0;
    let mut offset: u64 = 0;
    let mut prev_step: Option<u64> = None;
    let mut max_step: u64 = 0;
    for (i, rec) in rdr.records().enumerate() {
        let line = i + 1;
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                return Err(ReadError::Parse {
                    path: path.to_path_buf(),
                    line,
                    field: "row".to_string(),
                    reason: e.to_string(),
                });
            }
        };
        let cells: Vec<String> = rec.iter().map(|c| c.trim().to_string()).collect();
        if cells.iter().all(String::is_empty) {
            continue;
        }
        let Some(h) = &header else {
            step_col = step_column(&cells);
            metric_cols = cells
                .iter()
                .enumerate()
                .filter(|(j, c)| Some(*j) != step_col.map(|s| s.0) && tags::classify(c).is_some())
                .map(|(j, c)| (j, c.clone()))
                .collect();
            header = Some(cells);
            continue;
        };
        run.at_line(line);
        if &cells == h {
            // A header repeated by an appending logger: the logger started again.
            run.mark_segment(Some(Marker::RepeatedHeader), None);
            continue;
        }
        row_index += 1;
        let raw_step = match step_col {
            Some((j, _)) => match cells.get(j).and_then(|c| parse_num(c)) {
                Some(x) => to_step(x),
                None => continue, // a row without a step (e.g. a summary line)
            },
            None => row_index - 1,
        };
        // Appended runs restart their epochs: keep the x-axis monotonic, and mark the restart
        // with the file's own steps for the resume rule.
        if let Some(p) = prev_step
            && raw_step.saturating_add(offset) < p
            && raw_step.saturating_add(offset).saturating_add(1) < max_step
        {
            run.mark_segment(None, Some((p.saturating_sub(offset), raw_step)));
            offset = max_step.saturating_add(1).saturating_sub(raw_step);
        }
        let step = raw_step.saturating_add(offset);
        prev_step = Some(step);
        max_step = max_step.max(step);
        for (j, tag) in &metric_cols {
            let Some(cell) = cells.get(*j) else {
                continue;
            };
            if cell.is_empty() {
                continue;
            }
            match parse_num(cell) {
                Some(x) => run.push(tag, step, x),
                None if matches!(cell.as_str(), "NA" | "N/A" | "na" | "None" | "null" | "-") => {}
                None => {
                    return Err(ReadError::Parse {
                        path: path.to_path_buf(),
                        line,
                        field: tag.clone(),
                        reason: format!("`{cell}` is not a number"),
                    });
                }
            }
        }
    }
    run.hints.x_unit = match step_col {
        Some((_, u)) => u,
        None => XUnit::Epoch,
    };
    Ok(run)
}
