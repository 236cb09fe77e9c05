//! The run directory: one owner of its format, read and written by the Burn engine, the report,
//! the CLI and the Python package alike.
//!
//! A run directory holds `recipe.toml`, `run.json` (the format version), `plan.json`,
//! `classes.json`, `metrics.jsonl` ([`MetricsRow`]), `decisions.jsonl` ([`Decision`]),
//! `quarantine.jsonl` ([`QuarantineEntry`], runs that spiked only), `holdout-reads`,
//! `checkpoints/`, `data/` (the split) and `final/` ([`FinalEval`],
//! [`ModelCard`], the exported models). [`RunDir`] names every file; the typed rows are the only
//! way in or out.

#![warn(missing_docs)]

pub mod decision;
pub mod envelope;
pub mod eval;
pub mod format;
pub mod holdout;
pub mod journal;
pub mod nonfinite;
pub mod plan;
pub mod quarantine;
pub mod rows;

use std::path::{Path, PathBuf};

pub use decision::{Decision, DecisionKind};
pub use eval::{FinalEval, Measure, ModelCard, QuantEval, Variant};
pub use format::{FORMAT, RunFormat};
pub use journal::{JsonLines, read_jsonl};
pub use plan::{LrSegment, LrShape, PhasePlan, Plan, RunPlan};
pub use quarantine::{QuarantineEntry, QuarantineLog, SpikeCause};
pub use rows::{EvalRow, MetricsRow, SparsityRow, TrainRow, ValidateRow};

/// Why a run directory could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line of a JSONL file is not the row it should be.
    #[error("{}:{line}: {message}", path.display())]
    Row {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// A JSON file is not what it should be.
    #[error("{}: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// The run was written in another version of the format.
    #[error(
        "{}: run-directory format {found}, this Contrai reads format {expected}; use the Contrai that wrote it, or start a new run",
        path.display()
    )]
    Version {
        /// `run.json`.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The version this code reads and writes.
        expected: u32,
    },
    /// An atomic write failed.
    #[error(transparent)]
    Write(#[from] contrai_base::FsError),
}

impl RunError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RunError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Results of this crate.
pub type Result<T, E = RunError> = std::result::Result<T, E>;

/// The paths of a run directory's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir(PathBuf);

impl RunDir {
    /// The run directory at `path`.
    pub fn new(path: impl Into<PathBuf>) -> RunDir {
        RunDir(path.into())
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `recipe.toml`: the recipe in force (a resumed run keeps its own).
    pub fn recipe(&self) -> PathBuf {
        self.0.join("recipe.toml")
    }

    /// `run.json`: the format version.
    pub fn format(&self) -> PathBuf {
        self.0.join("run.json")
    }

    /// `plan.json`: the phase plan, re-planned as phases are entered.
    pub fn plan(&self) -> PathBuf {
        self.0.join("plan.json")
    }

    /// `classes.json`: the class names in index order.
    pub fn classes(&self) -> PathBuf {
        self.0.join("classes.json")
    }

    /// `metrics.jsonl`: one [`MetricsRow`] a line.
    pub fn metrics(&self) -> PathBuf {
        self.0.join("metrics.jsonl")
    }

    /// `decisions.jsonl`: one [`Decision`] a line.
    pub fn decisions(&self) -> PathBuf {
        self.0.join("decisions.jsonl")
    }

    /// `quarantine.jsonl`: one [`QuarantineEntry`] a line, the batches spike triage took out.
    pub fn quarantine(&self) -> PathBuf {
        self.0.join("quarantine.jsonl")
    }

    /// `holdout-reads`: how many times the holdout was read, across sessions.
    pub fn holdout_reads(&self) -> PathBuf {
        self.0.join("holdout-reads")
    }

    /// `checkpoints/`.
    pub fn checkpoints(&self) -> PathBuf {
        self.0.join("checkpoints")
    }

    /// `data/`: the split the run trains on (with its `manifest.json`).
    pub fn data(&self) -> PathBuf {
        self.0.join("data")
    }

    /// `final/`: the exported models and their evaluation.
    pub fn final_dir(&self) -> PathBuf {
        self.0.join("final")
    }

    /// A file of `final/` (one of the `FINAL_*` names).
    pub fn final_file(&self, name: &str) -> PathBuf {
        self.final_dir().join(name)
    }

    /// `final/eval.json`: written last; its presence marks a finished run.
    pub fn eval(&self) -> PathBuf {
        self.final_file(FINAL_EVAL)
    }

    /// `final/model-card.json`.
    pub fn model_card(&self) -> PathBuf {
        self.final_file(FINAL_CARD)
    }

    /// `report.html`.
    pub fn report(&self) -> PathBuf {
        self.0.join("report.html")
    }

    /// `compress/`: what `contrai compress` made from the run.
    pub fn compress(&self) -> PathBuf {
        self.0.join("compress")
    }

    /// Whether the directory holds a started run (metrics or checkpoints).
    pub fn is_started(&self) -> bool {
        self.metrics().exists() || self.checkpoints().exists()
    }

    /// Whether the run finished (its `final/eval.json` was written).
    pub fn is_finished(&self) -> bool {
        self.eval().is_file()
    }
}

/// One of the models a finished run exports in `final/`, as `contrai predict --variant` names it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    strum::Display,
    strum::EnumString,
    strum::VariantNames,
    strum::AsRefStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum FinalModel {
    /// The refined model, f32 weights (`final/model.safetensors`).
    F32,
    /// Its int8 model (`final/model-int8.bpk`), written when refine kept it.
    Int8,
    /// The distilled student (`final/student.safetensors`), written when refine distilled one.
    Student,
}

impl FinalModel {
    /// Its file in `final/`.
    pub fn file(self) -> &'static str {
        match self {
            FinalModel::F32 => FINAL_MODEL,
            FinalModel::Int8 => FINAL_INT8,
            FinalModel::Student => FINAL_STUDENT,
        }
    }
}

/// The refined model's weights in `final/` (safetensors, pruned zeros real).
pub const FINAL_MODEL: &str = "model.safetensors";
/// A pretrained model's fine-tune as a Hugging Face model directory in `final/`.
pub const FINAL_HF: &str = "hf";
/// The int8 model's record in `final/`.
pub const FINAL_INT8: &str = "model-int8.bpk";
/// The distilled student's weights in `final/`.
pub const FINAL_STUDENT: &str = "student.safetensors";
/// The student's training log in `final/`.
pub const FINAL_STUDENT_METRICS: &str = "student-metrics.jsonl";
/// The evaluation in `final/`.
pub const FINAL_EVAL: &str = "eval.json";
/// The model card in `final/`.
pub const FINAL_CARD: &str = "model-card.json";
/// The class list (in the run directory and in `final/`).
pub const CLASSES: &str = "classes.json";

/// Writes `v` as pretty JSON, atomically.
pub fn write_json<T: serde::Serialize>(path: &Path, v: &T) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(v).map_err(|e| RunError::Corrupt {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    contrai_base::write_atomic(path, &bytes)?;
    Ok(())
}

/// Reads JSON written by [`write_json`].
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = std::fs::read(path).map_err(|e| RunError::io(path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| RunError::Corrupt {
        path: path.to_path_buf(),
        message: format!("line {}: {e}", e.line()),
    })
}

/// Reads JSON written by [`write_json`]; `None` when the file does not exist.
pub fn read_json_if<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match path.try_exists() {
        Ok(true) => read_json(path).map(Some),
        Ok(false) => Ok(None),
        Err(e) => Err(RunError::io(path, e)),
    }
}
