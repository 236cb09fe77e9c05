//! Readers for every log format, with format detection from the path and content.

mod burn;
mod context;
mod csv_log;
mod hf;
mod json_tolerant;
mod jsonl;
mod mlflow;
mod proto;
mod tensorboard;
mod wandb;

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

pub(crate) use context::names_a_language_model;

use crate::series::Run;

pub use json_tolerant::parse_tolerant;
pub use tensorboard::{TbScalar, parse_events};

/// Why a log could not be read. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// A line or field could not be parsed.
    #[error("{path}:{line}: field `{field}`: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line (or record) number.
        line: usize,
        /// The field (column, key, or record part).
        field: String,
        /// What was wrong.
        reason: String,
    },
    /// A binary record failed its checksum or framing.
    #[error("{path}: corrupt record at byte {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the record.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// Neither the path nor the content matched a known format.
    #[error("{path}: unrecognised log format (use --format)")]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// The log holds no loss, accuracy, LR or gradient-norm series.
    #[error("{path}: no training metrics found (no loss, accuracy, lr or grad_norm series)")]
    NoMetrics {
        /// The file.
        path: PathBuf,
    },
}

/// A log format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// TensorBoard event files.
    Tensorboard,
    /// Hugging Face `trainer_state.json`.
    HfTrainerState,
    /// Lightning CSVLogger / Keras CSVLogger / any CSV with a loss column.
    Csv,
    /// Weights & Biases CSV export (several runs side by side).
    WandbCsv,
    /// MLflow file store.
    Mlflow,
    /// Burn metric logs.
    Burn,
    /// JSON lines (Contrai, LLaMA-Factory, any flat rows).
    Jsonl,
}

impl Format {
    /// Parses a `--format` value.
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "tensorboard" | "tb" | "tfevents" => Format::Tensorboard,
            "hf" | "hf_trainer_state" | "trainer_state" | "huggingface" => Format::HfTrainerState,
            "csv" | "lightning_csv" | "keras_csv" | "lightning" | "keras" => Format::Csv,
            "wandb" | "wandb_csv" => Format::WandbCsv,
            "mlflow" | "mlflow_filestore" => Format::Mlflow,
            "burn" | "burn_metric_logs" => Format::Burn,
            "jsonl" | "json_lines" | "ndjson" => Format::Jsonl,
            _ => return None,
        })
    }

    /// The format's canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Tensorboard => "tensorboard",
            Format::HfTrainerState => "hf_trainer_state",
            Format::Csv => "csv",
            Format::WandbCsv => "wandb_csv",
            Format::Mlflow => "mlflow_filestore",
            Format::Burn => "burn_metric_logs",
            Format::Jsonl => "jsonl",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub(crate) fn io_err(path: &Path, error: std::io::Error) -> ReadError {
    ReadError::Io {
        path: path.to_path_buf(),
        error,
    }
}

pub(crate) fn read_bytes(path: &Path) -> Result<Vec<u8>, ReadError> {
    fs::read(path).map_err(|e| io_err(path, e))
}

pub(crate) fn read_text(path: &Path) -> Result<String, ReadError> {
    let bytes = read_bytes(path)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Parses a numeric cell: `None` for missing markers, `Some(NaN/inf)` kept as evidence.
pub(crate) fn parse_num(s: &str) -> Option<f64> {
    let t = s.trim().trim_matches('"');
    if t.is_empty() {
        return None;
    }
    match t {
        "NA" | "N/A" | "na" | "None" | "null" | "-" => return None,
        _ => {}
    }
    t.parse::<f64>().ok()
}

/// Converts a parsed x value to a step (negative and non-finite become 0).
pub(crate) fn to_step(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 {
        x.round() as u64
    } else {
        0
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Extensions of files that are never a log (weights, archives, images): not opened when a
/// folder is searched for a Trainer state saved under another name.
const NOT_LOGS: [&str; 14] = [
    "bin",
    "safetensors",
    "pt",
    "pth",
    "ckpt",
    "npy",
    "npz",
    "h5",
    "onnx",
    "gz",
    "zip",
    "tar",
    "png",
    "jpg",
];

/// Whether a file's first bytes are a Trainer state's JSON (an object with `log_history`).
fn is_trainer_state(path: &Path) -> bool {
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase());
    if ext.is_some_and(|e| NOT_LOGS.contains(&e.as_str())) {
        return false;
    }
    let mut head = [0u8; 4096];
    let Ok(n) = fs::File::open(path).and_then(|mut f| std::io::Read::read(&mut f, &mut head)) else {
        return false;
    };
    let text = String::from_utf8_lossy(&head[..n]);
    text.trim_start().starts_with('{') && text.contains("\"log_history\"")
}

/// Detects the format of a file (or run directory) from its path and first bytes.
pub fn detect_format(path: &Path) -> Result<Format, ReadError> {
    if path.is_dir() {
        if burn::is_burn_root(path) {
            return Ok(Format::Burn);
        }
        if mlflow::is_run_dir(path) || mlflow::find_run_dirs(path).is_some_and(|v| !v.is_empty()) {
            return Ok(Format::Mlflow);
        }
        return Err(ReadError::UnknownFormat {
            path: path.to_path_buf(),
        });
    }
    let name = file_name(path);
    if name.starts_with("events.out.tfevents") {
        return Ok(Format::Tensorboard);
    }
    if mlflow::metric_file_run(path).is_some() {
        return Ok(Format::Mlflow);
    }
    if burn::file_root(path).is_some() {
        return Ok(Format::Burn);
    }
    if name == "trainer_state.json" {
        return Ok(Format::HfTrainerState);
    }
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") {
        return Ok(Format::Jsonl);
    }
    // Sniff the content.
    let bytes = read_bytes(path)?;
    let head = &bytes[..bytes.len().min(4096)];
    if tensorboard::looks_like_tfrecord(head) {
        return Ok(Format::Tensorboard);
    }
    let text = String::from_utf8_lossy(head);
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        if text.contains("\"log_history\"") || lower.ends_with(".json") {
            return Ok(Format::HfTrainerState);
        }
        return Ok(Format::Jsonl);
    }
    let first_line = trimmed.lines().next().unwrap_or("");
    if wandb::is_wandb_header(first_line) {
        return Ok(Format::WandbCsv);
    }
    if first_line.contains(',') || first_line.contains('\t') {
        return Ok(Format::Csv);
    }
    Err(ReadError::UnknownFormat {
        path: path.to_path_buf(),
    })
}

/// Reads a file or run directory into runs. `format` overrides detection.
pub fn read_path(path: &Path, format: Option<Format>) -> Result<Vec<Run>, ReadError> {
    if !path.exists() {
        return Err(io_err(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        ));
    }
    let runs = if path.is_dir() && format.is_none() {
        read_dir(path)?
    } else {
        let fmt = match format {
            Some(f) => f,
            None => detect_format(path)?,
        };
        read_as(path, fmt)?
    };
    let mut runs: Vec<Run> = runs.into_iter().filter(|r| !r.series.is_empty()).collect();
    for r in &mut runs {
        let log = PathBuf::from(&r.source);
        context::infer(r, if log.exists() { &log } else { path });
    }
    if runs.is_empty() {
        return Err(ReadError::NoMetrics {
            path: path.to_path_buf(),
        });
    }
    Ok(runs)
}

fn read_as(path: &Path, fmt: Format) -> Result<Vec<Run>, ReadError> {
    let raws = match fmt {
        Format::Tensorboard => {
            if path.is_dir() {
                tensorboard::read_dir(path)?
            } else {
                vec![tensorboard::read_file(path)?]
            }
        }
        Format::HfTrainerState => vec![hf::read(path)?],
        Format::Csv => vec![csv_log::read(path)?],
        Format::WandbCsv => wandb::read(path)?,
        Format::Mlflow => mlflow::read(path)?,
        Format::Burn => {
            let root = if path.is_dir() {
                path.to_path_buf()
            } else {
                burn::file_root(path).unwrap_or_else(|| path.to_path_buf())
            };
            vec![burn::read(&root)?]
        }
        Format::Jsonl => vec![jsonl::read(path)?],
    };
    Ok(raws.into_iter().flat_map(|r| r.into_runs()).collect())
}

/// Reads every log found under a directory: each TensorBoard folder, trainer_state.json,
/// JSONL, CSV, MLflow run and Burn artifact root becomes a run. A Contrai run directory is read
/// through its `metrics.jsonl` alone (its data partitions and decisions are not logs).
/// A Contrai run's gradient clip (`[main] clip_norm` of the resolved `recipe.toml` it keeps), or
/// `None` when the directory holds no such recipe or the run does not clip.
fn recipe_clip_norm(root: &Path) -> Option<f64> {
    let text = fs::read_to_string(root.join("recipe.toml")).ok()?;
    let recipe: toml::Table = text.parse().ok()?;
    let v = recipe.get("main")?.get("clip_norm")?;
    let clip = v.as_float().or_else(|| v.as_integer().map(|i| i as f64))?;
    (clip.is_finite() && clip > 0.0).then_some(clip)
}

/// Runs of one name (a W&B export a metric a file: `train_loss.csv`, `val_loss.csv` of the same
/// run) as one run: the series of each, the first file's where two give the same one.
fn merged_by_name(runs: Vec<Run>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for r in runs {
        match out.iter_mut().find(|o| o.name == r.name) {
            Some(o) => {
                for (s, data) in r.series {
                    o.series.entry(s).or_insert(data);
                }
                o.source = format!("{} + {}", o.source, r.source);
            }
            None => out.push(r),
        }
    }
    out
}

fn read_dir(root: &Path) -> Result<Vec<Run>, ReadError> {
    let metrics = root.join("metrics.jsonl");
    if metrics.is_file() {
        let mut runs = read_as(&metrics, Format::Jsonl)?;
        let clip = recipe_clip_norm(root);
        for r in &mut runs {
            if let Some(name) = root.file_name() {
                r.name = name.to_string_lossy().into_owned();
            }
            r.hints.clip_norm = clip;
        }
        return Ok(runs);
    }
    let mut runs = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        if burn::is_burn_root(&dir) {
            runs.extend(read_as(&dir, Format::Burn)?);
            continue;
        }
        if mlflow::is_run_dir(&dir) {
            runs.extend(read_as(&dir, Format::Mlflow)?);
            continue;
        }
        let mut entries: Vec<PathBuf> = fs::read_dir(&dir)
            .map_err(|e| io_err(&dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        let mut has_events = false;
        let mut wandb_runs = Vec::new();
        for p in &entries {
            if p.is_dir() {
                // Keras-style train/ and validation/ event folders belong to this run.
                if tensorboard::split_role(p).is_some() && tensorboard::has_event_files(p) {
                    has_events = true;
                } else if depth < 8 {
                    stack.push((p.clone(), depth + 1));
                }
                continue;
            }
            let name = file_name(p);
            let lower = name.to_ascii_lowercase();
            if name.starts_with("events.out.tfevents") {
                has_events = true;
            } else if name == "trainer_state.json" {
                runs.extend(read_as(p, Format::HfTrainerState)?);
            } else if name == "trainer_log.jsonl" && dir.join("trainer_state.json").is_file() {
                // LLaMA-Factory writes both for one run: the Trainer's state is the fuller record
                // (the log tells the task, `context::from_folder`).
                continue;
            } else if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") {
                runs.extend(read_as(p, Format::Jsonl)?);
            } else if lower.ends_with(".csv") || lower.ends_with(".log") {
                // Keras' CSVLogger writes any name (`training.log`, `predict_age.log`); a `.log`
                // that is no metrics table is someone's text log, passed over.
                let read = detect_format(p).and_then(|fmt| match fmt {
                    Format::Csv | Format::WandbCsv => read_as(p, fmt).map(|r| (fmt, r)),
                    _ => Ok((fmt, Vec::new())),
                });
                match read {
                    Ok((Format::WandbCsv, r)) => wandb_runs.extend(r),
                    Ok((_, r)) => runs.extend(r),
                    Err(_) if lower.ends_with(".log") => {}
                    Err(e) => return Err(e),
                }
            } else if is_trainer_state(p) {
                // A Trainer state saved under another name (the content tells, not the name).
                runs.extend(read_as(p, Format::HfTrainerState)?);
            }
        }
        runs.extend(merged_by_name(std::mem::take(&mut wandb_runs)));
        if has_events {
            runs.extend(read_as(&dir, Format::Tensorboard)?);
        }
    }
    Ok(runs)
}
