//! MLflow file store: `mlruns/<exp>/<run>/metrics/<key>`, lines `timestamp value [step]`.

use std::fs;
use std::path::{Path, PathBuf};

use super::{ReadError, file_name, io_err, parse_num, read_text, to_step};
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

/// The name `meta.yaml` gives a run, if any.
fn run_name(dir: &Path) -> Option<String> {
    let meta = fs::read_to_string(dir.join("meta.yaml")).ok()?;
    meta.lines().find_map(|line| {
        let v = line.strip_prefix("run_name:")?.trim().trim_matches(['\'', '"']);
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// One row of a metric's history, as every MLflow store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    /// Where the row is in its store (a file's line, a history's place).
    pub line: usize,
    pub timestamp: u64,
    pub step: u64,
    pub value: f64,
}

/// One MLflow run as a store holds it — the file store, a tracking server, its database —
/// read into a run by the same rules whichever store it came from.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stored {
    /// The run's id, its name when it has none.
    pub id: String,
    /// The name the store gives the run (else its `mlflow.runName` tag names it).
    pub name: Option<String>,
    pub source: String,
    pub params: Vec<(String, String)>,
    pub tags: Vec<(String, String)>,
    /// Each metric's history, by key.
    pub metrics: std::collections::BTreeMap<String, Vec<Row>>,
}

impl Stored {
    fn tag(&self, key: &str) -> Option<&str> {
        self.tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.trim())
    }

    /// The planned epochs the parameters name (`epochs`, `num_epochs`, `max_epochs`, ...: any
    /// parameter whose name ends in `epochs`), the largest when several do.
    fn planned_epochs(&self) -> Option<u64> {
        self.params
            .iter()
            .filter(|(k, _)| k.to_ascii_lowercase().ends_with("epochs"))
            .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
            .max()
    }

    /// The run: its metrics' histories, its parameters as the setup (LR, schedule, batch).
    pub fn into_raw(self, format: &str) -> RawRun {
        let name = (self.name.clone().filter(|n| !n.is_empty()))
            .or_else(|| {
                self.tag("mlflow.runName")
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| self.id.clone());
        let mut run = RawRun::new(name, self.source.clone(), format);
        for (k, v) in &self.params {
            run.hints.setup.absorb(k, v, "MLflow params");
        }
        // Keras/TensorFlow autologging logs once per epoch: its steps are epochs.
        let autolog = self
            .tag("mlflow.autologging")
            .is_some_and(|t| matches!(t, "keras" | "tensorflow"));
        let planned_epochs = self.planned_epochs();
        for (key, mut rows) in self.metrics {
            // `log_metric` called without a step logs every value at step 0: the order in time
            // is then the only axis (one value per call, as MLflow's own chart by time shows it).
            if rows.len() > 1 && rows.iter().all(|r| r.step == rows[0].step) {
                rows.sort_by_key(|r| r.timestamp);
                for (k, r) in rows.iter_mut().enumerate() {
                    r.step = k as u64;
                }
            }
            for r in rows {
                run.at_line(r.line);
                run.push(&key, r.step, r.value);
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
        run
    }
}

/// The `key value` files of a run's `params/` or `tags/` folder, sorted by key.
fn key_files(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let v = fs::read_to_string(e.path()).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), v.trim().to_string()))
        })
        .collect();
    out.sort();
    out
}

/// One metric file's rows: `timestamp value [step]` (a partial last line, still being written,
/// is left for the next read).
fn metric_rows(f: &Path) -> Result<Vec<Row>, ReadError> {
    let text = read_text(f)?;
    let last = text.lines().count();
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.is_empty() {
            continue;
        }
        let Some(value) = parts.get(1).and_then(|v| parse_num(v)) else {
            if i + 1 == last {
                break;
            }
            return Err(ReadError::Parse {
                path: f.to_path_buf(),
                line: i + 1,
                field: "value".to_string(),
                reason: format!("expected `timestamp value [step]`, got `{line}`"),
            });
        };
        rows.push(Row {
            line: i + 1,
            timestamp: parts.first().and_then(|t| t.parse::<u64>().ok()).unwrap_or(0),
            step: parts.get(2).and_then(|s| parse_num(s)).map_or(i as u64, to_step),
            value,
        });
    }
    Ok(rows)
}

fn read_run(dir: &Path) -> Result<RawRun, ReadError> {
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
    let mut stored = Stored {
        id: file_name(dir),
        name: run_name(dir),
        source: dir.display().to_string(),
        params: key_files(&dir.join("params")),
        tags: key_files(&dir.join("tags")),
        metrics: Default::default(),
    };
    for f in files {
        let key = f
            .strip_prefix(&metrics)
            .map(|k| k.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        stored.metrics.insert(key, metric_rows(&f)?);
    }
    Ok(stored.into_raw("mlflow_filestore"))
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
