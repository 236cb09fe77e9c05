//! `contrai._core`: the Rust core of Contrai's Python package. The conductor (its turns, state and
//! observations as Python objects in their serde forms, typed by the generated
//! `contrai.protocol`), the run-directory writer and checkpoint envelope, the mask selection, the
//! doctor, the data stage and the report; `python/contrai` wraps them.
//!
//! Errors become Python exceptions: a recipe problem a `ValueError` naming the file, line, key
//! and nearest valid key; a file problem an `OSError`; a protocol slip a `RuntimeError`.
//!
//! Each area is bound in a module of its own (`recipe`, `conductor`, `run`, `checkpoints`,
//! `masks`, `preflight`, `doctor`, `data`; the conversions they share in `convert`); this file
//! registers them all.

mod checkpoints;
mod conductor;
mod convert;
mod data;
mod doctor;
mod masks;
mod preflight;
mod recipe;
mod run;

/// The module: what each area binds, exported under one name. Every binding gives its Python
/// signature with types (`#[pyo3(signature = (name: "type", …) -> "type")]`): `_core.pyi` is
/// generated from them (`tests/stub.rs`).
#[pyo3::pymodule]
mod _core {
    use pyo3::prelude::*;

    #[pymodule_export]
    const RUN_FORMAT: u32 = contrai_run::FORMAT;
    #[pymodule_export]
    const RECORD_FORMAT: u32 = contrai_lifecycle::RECORD_FORMAT;

    #[pymodule_export]
    use crate::checkpoints::{
        Checkpoints, CorruptCheckpoint, PendingCheckpoint, checkpoint_record, put_in_place, seal, verify,
    };
    #[pymodule_export]
    use crate::conductor::Conductor;
    #[pymodule_export]
    use crate::data::{audit, key_pairs, near_pairs, signatures, split};
    #[pymodule_export]
    use crate::doctor::{doctor, report};
    #[pymodule_export]
    use crate::masks::{
        is_attention, magnitude_masks, module_of, pruned_weights, weakest_groups, whole_members,
    };
    #[pymodule_export]
    use crate::preflight::{preflight, recipe_facts};
    #[pymodule_export]
    use crate::recipe::{default_recipe, job_recipe, recipe_check, recipe_gives, recipe_json};
    #[pymodule_export]
    use crate::run::{RunLock, RunWriter};

    /// The package's version, which the macros cannot export as a constant.
    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))
    }
}
