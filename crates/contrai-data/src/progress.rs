//! A progress sink the caller implements (the CLI draws bars; libraries and tests stay silent).

/// Receives the progress of long work, stage by stage.
pub trait Progress: Sync {
    /// A new stage begins; `total` is in the stage's units when known.
    fn stage(&self, _name: &str, _total: Option<u64>) {}
    /// `n` more units are done.
    fn inc(&self, _n: u64) {}
    /// The current stage is over.
    fn finish(&self) {}
}

/// Reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {}
