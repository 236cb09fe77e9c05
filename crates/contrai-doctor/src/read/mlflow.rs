//! MLflow file store: `mlruns/<exp>/<run>/metrics/<key>`, lines `timestamp value [step]`.

use std::fs;
use std::path::{Path, PathBuf};

use super::{ReadError, io_err, parse_num, read_text, to_step};
use crate::series::RawRun;

/// True when `dir` is an MLflow run directory.
pub fn is_run_dir(dir: &Path) -> bool {
    dir.join("metrics").is_dir() && (dir.join("meta.yaml").is_file() || dir.join("params").is_dir())
}

/// Run directories under an mlruns or experiment folder (two levels deep).
pub fn find_run_dirs(dir: &Path) -> Option<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut level = vec![dir.to_path_buf()];
    for _ in 0..3 {
        let mut next = Vec::new();
        for d in &level {
            let Ok(rd) = fs::read_dir(d) else { continue };
            let mut subs: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            subs.sort();
            for s in subs.into_iter().filter(|p| p.is_dir()) {
                if is_run_dir(&s) {
                    out.push(s);
                } else {
                    next.push(s);
                }
            }
        }
        level = next;
    }
    Some(out)
}

/// The run directory of a metric file path (`.../<run>/metrics/<key>`), if it is one.
pub fn metric_file_run(path: &Path) -> Option<PathBuf> {
    let mut cur = path.parent();
    while let Some(d) = cur {
        if d.file_name().is_some_and(|n| n == "metrics") {
            let run = d.parent()?;
            return is_run_dir(run).then(|| run.to_path_buf());
        }
        cur = d.parent();
    }
    None
}

fn run_name(dir: &Path) -> String {
    if let Ok(meta) = fs::read_to_string(dir.join("meta.yaml")) {
        for line in meta.lines() {
            if let Some(v) = line.strip_prefix("run_name:") {
                let v = v.trim().trim_matches('\'').trim_matches('"');
                if !v.is_empty() {
                    return v.to_string();
                }
            }
        }
    }
    if let Ok(n) = fs::read_to_string(dir.join("tags").join("mlflow.runName")) {
        let n = n.trim();
        if !n.is_empty() {
            return n.to_string();
        }
    }
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The planned epochs a run's parameters name (`epochs`, `Epochs`, `num_epochs`, `max_epochs`,
/// ...: any parameter whose name ends in `epochs`), the largest when several do.
fn planned_epochs(params: &Path) -> Option<u64> {
    fs::read_dir(params)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .to_ascii_lowercase()
                .ends_with("epochs")
        })
        .filter_map(|e| fs::read_to_string(e.path()).ok()?.trim().parse::<u64>().ok())
        .max()
}

fn read_run(dir: &Path) -> Result<RawRun, ReadError> {
    let mut run = RawRun::new(run_name(dir), dir.display().to_string(), "mlflow_filestore");
    let metrics = dir.join("metrics");
    let mut stack = vec![metrics.clone()];
    let mut files = Vec::new();
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).map_err(|e| io_err(&d, e))? {
            let p = e.map_err(|e| io_err(&d, e))?.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    // Keras/TensorFlow autologging logs once per epoch: its steps are epochs.
    let planned_epochs = planned_epochs(&dir.join("params"));
    let autolog = fs::read_to_string(dir.join("tags").join("mlflow.autologging"))
        .map(|t| matches!(t.trim(), "keras" | "tensorflow"))
        .unwrap_or(false);
    for f in files {
        let key = f
            .strip_prefix(&metrics)
            .map(|k| k.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        let text = read_text(&f)?;
        let mut rows = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            if parts.is_empty() {
                continue;
            }
            let value = parts.get(1).and_then(|v| parse_num(v));
            let Some(value) = value else {
                // A partial last line of a file being written is fine; elsewhere it is an error.
                if i + 1 == text.lines().count() {
                    break;
                }
                return Err(ReadError::Parse {
                    path: f.clone(),
                    line: i + 1,
                    field: "value".to_string(),
                    reason: format!("expected `timestamp value [step]`, got `{line}`"),
                });
            };
            let time = parts.first().and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
            let step = parts.get(2).and_then(|s| parse_num(s)).map(to_step);
            rows.push((i + 1, time, step.unwrap_or(i as u64), value));
        }
        // `log_metric` called without a step logs every value at step 0: the order in time is
        // then the only axis (one value per call, as MLflow's own chart by time shows it).
        if rows.len() > 1 && rows.iter().all(|r| r.2 == rows[0].2) {
            rows.sort_by_key(|r| r.1);
            for (k, r) in rows.iter_mut().enumerate() {
                r.2 = k as u64;
            }
        }
        for (line, _, step, value) in rows {
            run.at_line(line);
            run.push(&key, step, value);
        }
    }
    let max_step = run
        .tags
        .iter()
        .flat_map(|(_, p)| p.iter().map(|p| p.step))
        .max()
        .unwrap_or(0);
    if autolog || planned_epochs.is_some_and(|e| max_step < e.max(1)) {
        run.hints.x_unit = crate::series::XUnit::Epoch;
    }
    Ok(run)
}

/// Reads an mlruns folder, an experiment folder, a run folder, or one metric file's run.
pub fn read(path: &Path) -> Result<Vec<RawRun>, ReadError> {
    let dirs = if path.is_file() {
        metric_file_run(path).into_iter().collect()
    } else if is_run_dir(path) {
        vec![path.to_path_buf()]
    } else {
        find_run_dirs(path).unwrap_or_default()
    };
    dirs.iter().map(|d| read_run(d)).collect()
}
