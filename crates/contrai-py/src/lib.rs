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

use pyo3::prelude::*;

/// The module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("RUN_FORMAT", contrai_run::FORMAT)?;
    m.add("RECORD_FORMAT", contrai_lifecycle::RECORD_FORMAT)?;
    m.add_class::<conductor::Conductor>()?;
    m.add_class::<run::RunWriter>()?;
    m.add_class::<checkpoints::Checkpoints>()?;
    m.add_class::<checkpoints::PendingCheckpoint>()?;
    m.add_class::<run::RunLock>()?;
    m.add_function(wrap_pyfunction!(checkpoints::seal, m)?)?;
    m.add_function(wrap_pyfunction!(data::signatures, m)?)?;
    m.add_function(wrap_pyfunction!(data::key_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(data::near_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoints::verify, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoints::checkpoint_record, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoints::put_in_place, m)?)?;
    m.add(
        "CorruptCheckpoint",
        m.py().get_type::<checkpoints::CorruptCheckpoint>(),
    )?;
    m.add_function(wrap_pyfunction!(recipe::recipe_check, m)?)?;
    m.add_function(wrap_pyfunction!(recipe::recipe_json, m)?)?;
    m.add_function(wrap_pyfunction!(recipe::recipe_gives, m)?)?;
    m.add_function(wrap_pyfunction!(preflight::recipe_facts, m)?)?;
    m.add_function(wrap_pyfunction!(masks::module_of, m)?)?;
    m.add_function(wrap_pyfunction!(masks::is_attention, m)?)?;
    m.add_function(wrap_pyfunction!(masks::whole_members, m)?)?;
    m.add_function(wrap_pyfunction!(masks::pruned_weights, m)?)?;
    m.add_function(wrap_pyfunction!(masks::magnitude_masks, m)?)?;
    m.add_function(wrap_pyfunction!(masks::weakest_groups, m)?)?;
    m.add_function(wrap_pyfunction!(recipe::default_recipe, m)?)?;
    m.add_function(wrap_pyfunction!(recipe::job_recipe, m)?)?;
    m.add_function(wrap_pyfunction!(doctor::doctor, m)?)?;
    m.add_function(wrap_pyfunction!(doctor::report, m)?)?;
    m.add_function(wrap_pyfunction!(data::audit, m)?)?;
    m.add_function(wrap_pyfunction!(data::split, m)?)?;
    m.add_function(wrap_pyfunction!(preflight::preflight, m)?)?;
    Ok(())
}
