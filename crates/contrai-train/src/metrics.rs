//! `metrics.jsonl` and `decisions.jsonl`: one flat JSON object a line (`../shared/DESIGN.md` §3),
//! written through as each row is produced, truncated back to a checkpoint's length on resume.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Result, TrainError};

/// A training row, written after every optimizer step.
#[derive(Debug, Clone, Serialize)]
pub struct TrainRow<'a> {
    /// Optimizer steps done (1-based).
    pub step: u64,
    /// Phase name.
    pub phase: &'a str,
    /// Training samples seen.
    pub samples: u64,
    /// Mean loss of the step's effective batch.
    pub train_loss: f32,
    /// Learning rate used by the step.
    pub lr: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f32,
    /// Effective batch of the step.
    pub batch_size: usize,
    /// Seconds of training so far (summed over resumed sessions).
    pub wall_s: f64,
}

/// An evaluation row, written at eval steps.
#[derive(Debug, Clone, Serialize)]
pub struct EvalRow<'a> {
    /// Optimizer steps done.
    pub step: u64,
    /// Phase name.
    pub phase: &'a str,
    /// Mean validation loss.
    pub val_loss: f32,
    /// Validation accuracy in [0, 1].
    pub val_accuracy: f32,
}

/// A validate-phase row: the loss of the one batch being overfitted.
#[derive(Debug, Clone, Serialize)]
pub struct ValidateRow {
    /// Global step (validate takes the first steps).
    pub step: u64,
    /// Always `validate`.
    pub phase: &'static str,
    /// Loss on the one batch.
    pub validate_loss: f32,
}

/// An open JSON-lines file (`metrics.jsonl`, `decisions.jsonl`).
#[derive(Debug)]
pub struct JsonLines {
    file: File,
    path: PathBuf,
    len: u64,
}

impl JsonLines {
    /// Opens `path` for appending after cutting it to `keep` bytes (0 starts afresh).
    pub fn open(path: &Path, keep: u64) -> Result<JsonLines> {
        let io = |e| TrainError::io(path, e);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(io)?;
        let found = file.metadata().map_err(io)?.len();
        if found < keep {
            return Err(TrainError::Corrupt {
                path: path.to_path_buf(),
                message: format!("holds {found} bytes, fewer than the {keep} the checkpoint recorded"),
            });
        }
        file.set_len(keep).map_err(io)?;
        let mut m = JsonLines {
            file,
            path: path.to_path_buf(),
            len: keep,
        };
        use std::io::Seek;
        m.file.seek(std::io::SeekFrom::Start(keep)).map_err(io)?;
        Ok(m)
    }

    /// Appends one row and hands it to the OS; returns the line written (the live doctor reads
    /// exactly what a reader of the file will).
    pub fn write<T: Serialize>(&mut self, row: &T) -> Result<Vec<u8>> {
        let mut line = serde_json::to_vec(row).map_err(|e| TrainError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|_| self.file.flush())
            .map_err(|e| TrainError::io(&self.path, e))?;
        self.len += line.len() as u64;
        Ok(line)
    }

    /// Bytes written so far (what a checkpoint records).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forces the rows to disk (before a checkpoint refers to them).
    pub fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| TrainError::io(&self.path, e))
    }
}
