//! Readers for every log format, with format detection from the path and content.

mod burn;
mod context;
mod csv_log;
mod hf;
mod json_tolerant;
mod jsonl;
mod keras_json;
mod mlflow;
mod mlflow_db;
mod mlflow_server;
mod plan;
mod proto;
mod source;
mod sqlite;
mod tail;
mod tensorboard;
mod trackio;
mod wandb;
mod wandb_run;

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

pub(crate) use context::names_a_language_model;

use crate::series::Run;

pub use json_tolerant::parse_tolerant;
pub use mlflow_server::Location as TrackingLocation;
pub use tail::Tail;
pub use tensorboard::{TbScalar, parse_events};

use crate::series::RawRun;

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
    /// A database's table could not be read (SQLite's own words), or is not the one expected.
    #[error("{path}: table `{table}`: {reason}")]
    Table {
        /// The database file.
        path: PathBuf,
        /// The table.
        table: String,
        /// What was wrong.
        reason: String,
    },
    /// A tracking server could not be read (not there, refused, or said no).
    #[error("{url}: {reason}")]
    Remote {
        /// The location as given.
        url: String,
        /// What went wrong, with the request and the server's own message.
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
    /// A folder given with `--format` holds no log of that format.
    #[error("{path}: no {} log found in this folder (--format {}; leave --format out to read any log)", format.name(), format.name())]
    NoLogOfFormat {
        /// The folder.
        path: PathBuf,
        /// The format asked for.
        format: Format,
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
    /// Weights & Biases run file (`run-<id>.wandb`), online or offline.
    Wandb,
    /// Weights & Biases CSV export (several runs side by side).
    WandbCsv,
    /// MLflow file store.
    Mlflow,
    /// MLflow database store (`mlflow.db`, SQLite).
    MlflowDb,
    /// Trackio's local database (SQLite).
    Trackio,
    /// Burn metric logs.
    Burn,
    /// JSON lines (Contrai, LLaMA-Factory, any flat rows).
    Jsonl,
    /// A Keras `History` saved as JSON (each metric's per-epoch list).
    KerasJson,
}

impl Format {
    /// Every format, in the order `--format`'s help lists them.
    pub const ALL: [Format; 11] = [
        Format::Tensorboard,
        Format::HfTrainerState,
        Format::Csv,
        Format::Wandb,
        Format::WandbCsv,
        Format::Mlflow,
        Format::MlflowDb,
        Format::Trackio,
        Format::Burn,
        Format::Jsonl,
        Format::KerasJson,
    ];

    /// Parses a `--format` value.
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "tensorboard" | "tb" | "tfevents" => Format::Tensorboard,
            "hf" | "hf_trainer_state" | "trainer_state" | "huggingface" => Format::HfTrainerState,
            "csv" | "lightning_csv" | "keras_csv" | "lightning" | "keras" => Format::Csv,
            "wandb" | "wandb_run" => Format::Wandb,
            "wandb_csv" => Format::WandbCsv,
            "mlflow" | "mlflow_filestore" => Format::Mlflow,
            "mlflow_db" | "mlflow_sqlite" => Format::MlflowDb,
            "trackio" => Format::Trackio,
            "burn" | "burn_metric_logs" => Format::Burn,
            "jsonl" | "json_lines" | "ndjson" => Format::Jsonl,
            "keras_json" | "keras_history" | "history_json" => Format::KerasJson,
            _ => return None,
        })
    }

    /// The format's canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Tensorboard => "tensorboard",
            Format::HfTrainerState => "hf_trainer_state",
            Format::Csv => "csv",
            Format::Wandb => "wandb",
            Format::WandbCsv => "wandb_csv",
            Format::Mlflow => "mlflow_filestore",
            Format::MlflowDb => "mlflow_db",
            Format::Trackio => "trackio",
            Format::Burn => "burn_metric_logs",
            Format::Jsonl => "jsonl",
            Format::KerasJson => "keras_json",
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

/// A reader that takes a log's bytes as they are written.
pub(crate) trait Stream: Send {
    /// Reads the complete records at the start of `data` (the bytes after those it took last)
    /// into `run`; returns how many bytes it took. `eof`: the file ends there (a one-off read),
    /// so a last line without its newline is read too.
    fn feed(&mut self, run: &mut RawRun, data: &[u8], eof: bool) -> Result<usize, ReadError>;
    /// Sets what only the whole log tells (its x unit) on a copy of the run read so far.
    fn finish(&self, run: &mut RawRun);
}

/// The length of `data`'s complete lines: all of it at the end of the file, else up to and
/// with its last newline (a line still being written waits).
pub(crate) fn complete_lines(data: &[u8], eof: bool) -> usize {
    if eof {
        data.len()
    } else {
        data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)
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

/// The names of a line-by-line log's (a CSV's, a JSONL's) step column or key, most telling
/// first.
pub(crate) const STEP_KEYS: [&str; 7] = [
    "step",
    "global_step",
    "trainer/global_step",
    "_step",
    "current_steps",
    "iteration",
    "iter",
];

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
    file_head(path).is_ok_and(|head| opens_trainer_state(&String::from_utf8_lossy(&head)))
}

/// Whether a file's first bytes (as text) open a Trainer state: an object with `log_history`.
pub(crate) fn opens_trainer_state(head: &str) -> bool {
    head.trim_start().starts_with('{') && head.contains("\"log_history\"")
}

/// How much of a file's start its format is told by.
pub(crate) const HEAD_BYTES: usize = 4096;

/// A file's first [`HEAD_BYTES`] (all of a shorter one): what its format is told by.
pub(crate) fn file_head(path: &Path) -> Result<Vec<u8>, ReadError> {
    let mut head = Vec::with_capacity(HEAD_BYTES);
    fs::File::open(path)
        .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, HEAD_BYTES as u64), &mut head))
        .map_err(|e| io_err(path, e))?;
    Ok(head)
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
    if lower.ends_with(".wandb") {
        return Ok(Format::Wandb);
    }
    if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") {
        return Ok(Format::Jsonl);
    }
    // Sniff the content.
    let head = file_head(path)?;
    let head = head.as_slice();
    if tensorboard::looks_like_tfrecord(head) {
        return Ok(Format::Tensorboard);
    }
    if wandb_run::is_run_file(head) {
        return Ok(Format::Wandb);
    }
    if sqlite::is_sqlite(head) {
        // A SQLite database is read when it is Trackio's or MLflow's; any other is unknown.
        return sqlite_format(path).ok_or_else(|| ReadError::UnknownFormat {
            path: path.to_path_buf(),
        });
    }
    let text = String::from_utf8_lossy(head);
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') && keras_json::looks_like(trimmed) {
        return Ok(Format::KerasJson);
    }
    if trimmed.starts_with('{') {
        let trainer_state = opens_trainer_state(trimmed);
        if !trainer_state && keras_json::looks_like(trimmed) {
            return Ok(Format::KerasJson);
        }
        if trainer_state || lower.ends_with(".json") {
            return Ok(Format::HfTrainerState);
        }
        return Ok(Format::Jsonl);
    }
    let first_line = trimmed.lines().next().unwrap_or("");
    if wandb::is_wandb_header(first_line) {
        return Ok(Format::WandbCsv);
    }
    if csv_log::delimiter(first_line.as_bytes()).is_some() {
        return Ok(Format::Csv);
    }
    Err(ReadError::UnknownFormat {
        path: path.to_path_buf(),
    })
}

/// The format of a SQLite database the doctor reads (Trackio's, MLflow's), if it is one.
fn sqlite_format(path: &Path) -> Option<Format> {
    if trackio::is_db(path) {
        Some(Format::Trackio)
    } else {
        mlflow_db::is_db(path).then_some(Format::MlflowDb)
    }
}

/// A file under a folder that gave no run, and why: the runs beside it are read all the same.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// Why it gave no run (the reader's error).
    pub reason: String,
}

/// Reads a file or run directory into runs. `format` overrides detection (a directory is then
/// searched for logs of that format).
pub fn read_path(path: &Path, format: Option<Format>) -> Result<Vec<Run>, ReadError> {
    read_path_noting(path, format).map(|(runs, _)| runs)
}

/// [`read_path`], with the files under a folder that gave no run and why.
pub fn read_path_noting(path: &Path, format: Option<Format>) -> Result<(Vec<Run>, Vec<Skipped>), ReadError> {
    let mut tail = Tail::once(path, format);
    tail.poll()?;
    Ok((tail.runs()?, tail.skipped().to_vec()))
}
