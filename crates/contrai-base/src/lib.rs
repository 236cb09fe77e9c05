//! The bottom of Contrai's crates: the typed choices several layers name (a data file's
//! [`Format`], the split's [`Dedup`] and [`OnConflict`] policies) and the file-system primitives
//! every writer uses (atomic files, the one-writer directory lock). No Arrow, no tensors: the
//! recipe, the run format and the conductor build on it without the data stage.

pub mod atomic;
pub mod data_choices;
pub mod error;
pub mod lock;

pub use atomic::{AtomicFile, exchange, put_in_place, remove_leftovers, sync_dir, write_atomic};
pub use data_choices::{Dedup, FORMATS, Format, OnConflict};
pub use error::{FsError, Result};
pub use lock::DirLock;
