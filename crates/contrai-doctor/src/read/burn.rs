//! Burn metric logs: `{train,valid}/epoch-N/<Metric>.log`, one value or `value,count` a line.

use std::fs;
use std::path::{Path, PathBuf};

use super::{ReadError, io_err, parse_num, read_text};
use crate::series::{RawRun, XUnit};

fn epoch_of(dir: &Path) -> Option<u64> {
    dir.file_name()?.to_str()?.strip_prefix("epoch-")?.parse().ok()
}

/// True when `dir` holds `train/` or `valid/` with `epoch-N` folders.
pub fn is_burn_root(dir: &Path) -> bool {
    ["train", "valid"].iter().any(|s| {
        fs::read_dir(dir.join(s)).is_ok_and(|rd| {
            rd.filter_map(Result::ok)
                .any(|e| e.path().is_dir() && epoch_of(&e.path()).is_some())
        })
    })
}

/// The artifact root of a `.../{train,valid}/epoch-N/X.log` file.
pub fn file_root(path: &Path) -> Option<PathBuf> {
    let epoch_dir = path.parent()?;
    epoch_of(epoch_dir)?;
    let split = epoch_dir.parent()?;
    let name = split.file_name()?.to_str()?;
    if name == "train" || name == "valid" {
        split.parent().map(Path::to_path_buf)
    } else {
        None
    }
}

/// Reads a Burn artifact root; each epoch's value is the count-weighted mean of its lines.
pub fn read(root: &Path) -> Result<RawRun, ReadError> {
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut run = RawRun::new(name, root.display().to_string(), "burn_metric_logs");
    run.hints.x_unit = XUnit::Epoch;
    for split in ["train", "valid"] {
        let sdir = root.join(split);
        let Ok(rd) = fs::read_dir(&sdir) else {
            continue;
        };
        let mut epochs: Vec<(u64, PathBuf)> = rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter_map(|p| epoch_of(&p).map(|n| (n, p)))
            .collect();
        epochs.sort();
        for (epoch, dir) in epochs {
            let mut files: Vec<PathBuf> = fs::read_dir(&dir)
                .map_err(|e| io_err(&dir, e))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect();
            files.sort();
            for f in files {
                let metric = f
                    .file_stem()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let text = read_text(&f)?;
                let (mut sum, mut weight) = (0.0f64, 0.0f64);
                for (i, line) in text.lines().enumerate() {
                    let line = line.trim();
                    if line.is_empty() {
                        continue;
                    }
                    let (v, c) = match line.split_once(',') {
                        Some((v, c)) => (parse_num(v), parse_num(c)),
                        None => (parse_num(line), Some(1.0)),
                    };
                    let (Some(v), Some(c)) = (v, c) else {
                        return Err(ReadError::Parse {
                            path: f.clone(),
                            line: i + 1,
                            field: metric.clone(),
                            reason: format!("expected `value` or `value,count`, got `{line}`"),
                        });
                    };
                    let c = if c.is_finite() && c > 0.0 { c } else { 1.0 };
                    sum += v * c;
                    weight += c;
                }
                if weight > 0.0 {
                    run.push(&format!("{split}/{metric}"), epoch, sum / weight);
                }
            }
        }
    }
    Ok(run)
}
