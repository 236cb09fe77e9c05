//! Errors of the data stage, each naming the file and, where it applies, the line and field.

use std::path::PathBuf;

/// Everything that can go wrong while reading, auditing or splitting a dataset.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A file-system primitive failed (an atomic write, the directory lock).
    #[error(transparent)]
    Fs(#[from] contrai_base::FsError),
    /// The operating system refused a read or write.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A directory was given where a data file was expected.
    #[error("{}: is a directory; give a .jsonl, .csv, .tsv or .parquet file", path.display())]
    IsDirectory {
        /// The directory.
        path: PathBuf,
    },
    /// A split's output folder holds something it must not replace.
    #[error("{}: {message}", path.display())]
    Output {
        /// The folder, or the manifest of the split in it.
        path: PathBuf,
        /// What it holds and what to do.
        message: String,
    },
    /// The file holds no bytes, or no rows.
    #[error("{}: the file is empty (no rows to read)", path.display())]
    Empty {
        /// The empty file.
        path: PathBuf,
    },
    /// The format could not be told from the extension.
    #[error("{}: cannot tell the format from {}; pass --format {} (in a recipe: data.format)", path.display(), if ext.is_empty() { "a name without an extension".to_string() } else { format!("the extension `.{ext}`") }, crate::read::FORMATS)]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// Its extension (possibly empty).
        ext: String,
    },
    /// One row could not be parsed: the file, the line (or row) and what was wrong.
    #[error("{}:{line}: {message}", path.display())]
    Row {
        /// The file.
        path: PathBuf,
        /// 1-based line (JSONL, CSV) or row (Parquet) number.
        line: u64,
        /// What was wrong and what was expected.
        message: String,
    },
    /// A field that the command needs does not exist in the data.
    #[error("{}: no {role} field `{field}`; fields found: {found} (choose one with --{role})", path.display())]
    MissingField {
        /// The file.
        path: PathBuf,
        /// `text`, `label` or `id`.
        role: &'static str,
        /// The field asked for.
        field: String,
        /// The fields that do exist, comma-separated.
        found: String,
    },
    /// A Parquet or Arrow error that is not tied to one row.
    #[error("{}: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// The decoder's message.
        message: String,
    },
    /// A parameter is out of its range.
    #[error("invalid parameter: {0}")]
    Param(String),
    /// The manifest of an earlier split could not be used.
    #[error("{}: {message}", path.display())]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// Two versions of a dataset do not hold the same fields.
    #[error("{old} and {new} differ in schema: {what}; compare versions with the same fields")]
    Schema {
        /// The old version.
        old: String,
        /// The new version.
        new: String,
        /// The fields each lacks.
        what: String,
    },
    /// A new version of a split would hold fewer of its parent's holdout samples.
    #[error(
        "{}: the new version's holdout holds {lost} fewer of the parent's {parent} holdout samples (e.g. {examples}): they left the data, or they match an evaluation set; the holdout's figures would no longer compare with the parent's (pass --allow-shrink to accept)",
        path.display()
    )]
    HoldoutShrinks {
        /// The parent's manifest.
        path: PathBuf,
        /// Parent holdout samples not in the new holdout.
        lost: u64,
        /// The parent's holdout samples.
        parent: u64,
        /// A few of their ids, as the parent's holdout file gives them.
        examples: String,
    },
    /// The post-write guard found samples shared across partitions.
    #[error(
        "split guard failed: {count} leaking sample group(s) across partitions, e.g. {examples}; nothing was written"
    )]
    Leak {
        /// How many clusters span more than one partition.
        count: usize,
        /// A few offending groups, `partition:id` each.
        examples: String,
    },
}

impl DataError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.into(),
            source,
        }
    }

    /// True for errors confined to one row, which `--skip-bad` may skip.
    pub fn is_row_error(&self) -> bool {
        matches!(self, DataError::Row { .. })
    }
}

/// Result alias of the data stage.
pub type Result<T, E = DataError> = std::result::Result<T, E>;
