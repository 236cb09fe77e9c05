//! Contrai's data stage: read a dataset, find exact and near duplicates and label conflicts,
//! and split it into train, validation and holdout partitions that share no sample.

pub mod audit;
pub mod cluster;
pub mod commit;
pub mod contamination;
pub mod demo;
pub mod drift;
pub mod error;
pub mod index;
pub mod minhash;
pub mod near;
pub mod numeric;
pub mod parent;
pub mod progress;
pub mod read;
pub mod split;
pub mod store;
pub mod text;
pub mod write;

pub use audit::{Audit, AuditConfig};
pub use contrai_base::{DirLock, lock};
pub use error::{DataError, Result};
pub use index::{Content, IndexConfig};
pub use progress::{Progress, Silent};
pub use read::{FieldSpec, Format, Source};
