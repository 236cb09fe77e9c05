//! Why training stopped.

use std::path::PathBuf;

/// Every way a training run can fail; none is a panic on user input.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The data stage failed (reading, auditing or splitting).
    #[error(transparent)]
    Data(#[from] contrai_data::DataError),
    /// An atomic write or the run directory's lock failed.
    #[error(transparent)]
    Fs(#[from] contrai_base::FsError),
    /// A file of the run could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The split's guard found samples shared between partitions.
    #[error(
        "the split in {} leaks: {shared} shared texts and {near} cross-partition near-duplicate pairs; refusing to train",
        dir.display()
    )]
    Leak {
        /// The split directory.
        dir: PathBuf,
        /// Content hashes found in more than one partition.
        shared: u64,
        /// Near-duplicate pairs across partitions.
        near: u64,
    },
    /// A pretrained model directory is missing a file, or its files do not fit together.
    #[error(transparent)]
    Pretrained(#[from] contrai_bert::BertError),
    /// The data cannot train a classifier (no samples, one class, unknown labels ...).
    #[error("data: {0}")]
    BadData(String),
    /// The recipe asks for something this trainer cannot do.
    #[error("recipe: {0}")]
    Unsupported(String),
    /// A run directory or checkpoint is not what it should be.
    #[error("{}: {message}", path.display())]
    Corrupt {
        /// The offending file or directory.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// A resumed run's data changed since it split (or copied) it.
    #[error(
        "{what}: resuming would train on two versions of the data. Resume on the split the run holds with --keep-split, or start a new run on the new data (`contrai data split NEW --from OLD` keeps the old samples where they were)"
    )]
    SplitChanged {
        /// What changed.
        what: String,
    },
    /// The run directory already holds a run and `--resume` was not given.
    #[error("{} already holds a run: pass --resume to continue it, or choose another --out / run.name", path.display())]
    Exists {
        /// The run directory.
        path: PathBuf,
    },
    /// The `validate` phase failed: the pipeline cannot learn; nothing more was spent.
    #[error("validate: {0}")]
    ValidateFailed(String),
    /// A non-finite loss or gradient persisted after every allowed rollback.
    #[error("training diverged: {0}")]
    Diverged(String),
    /// The holdout was asked for a second time.
    #[error("the holdout was already evaluated once; it is never read twice")]
    HoldoutReadTwice,
    /// A run-directory file could not be read or written.
    #[error(transparent)]
    Run(#[from] contrai_run::RunError),
    /// The conductor and the engine disagree (a bug, reported rather than hidden).
    #[error(transparent)]
    Conductor(#[from] contrai_lifecycle::ConductorError),
    /// A Burn record could not be written or read.
    #[error("{}: {message}", path.display())]
    Record {
        /// The record's file.
        path: PathBuf,
        /// Burn's message.
        message: String,
    },
}

impl TrainError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TrainError::Io {
            path: path.into(),
            source,
        }
    }
}

impl From<contrai_lifecycle::Failure> for TrainError {
    fn from(f: contrai_lifecycle::Failure) -> Self {
        match f {
            contrai_lifecycle::Failure::Validate(why) => TrainError::ValidateFailed(why),
            contrai_lifecycle::Failure::Diverged(why) => TrainError::Diverged(why),
        }
    }
}

/// A Burn record that could not be written or read at `path`.
pub(crate) fn record_err(path: &std::path::Path, e: impl std::fmt::Display) -> TrainError {
    TrainError::Record {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Results of this crate.
pub type Result<T, E = TrainError> = std::result::Result<T, E>;
