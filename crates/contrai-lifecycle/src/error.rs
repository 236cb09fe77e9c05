//! Why the conductor could not go on.

/// Why the conductor could not go on.
#[derive(Debug, thiserror::Error)]
pub enum ConductorError {
    /// An observation that does not answer the request (an engine's bug).
    #[error("protocol: {0}")]
    Protocol(String),
    /// A checkpoint record that cannot be read (its source and field named).
    #[error("{0}")]
    Record(String),
    /// A checkpoint's state of another layout.
    #[error("the checkpoint's conductor state is version {found}; this Contrai reads version {expected}")]
    Version {
        /// The version found.
        found: u32,
        /// The version this code reads.
        expected: u32,
    },
}

/// Results of this crate.
pub type Result<T, E = ConductorError> = std::result::Result<T, E>;
