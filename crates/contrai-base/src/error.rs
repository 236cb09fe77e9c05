//! Errors of the file-system primitives, each naming the path.

use std::path::PathBuf;

/// A write, a rename or a lock that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The operating system refused a read or write.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Another process holds the directory's lock.
    #[error(
        "{}: in use by {holder}; wait for it to finish, or stop it (Ctrl-C, or `kill` with its pid: a training run writes a checkpoint first)",
        dir.display()
    )]
    Busy {
        /// The locked directory.
        dir: PathBuf,
        /// Who holds it: the process id, its command line and since when, as far as known.
        holder: String,
    },
}

impl FsError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FsError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result alias of the file-system primitives.
pub type Result<T, E = FsError> = std::result::Result<T, E>;
