//! Binds the recipe: its check, its resolved forms, the keys its text gives, the default recipes.

use std::path::Path;

use contrai_recipe::Recipe;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::convert::json;

/// Parses and validates recipe text (`path` names it in errors).
pub(crate) fn parse(text: &str, path: &str) -> PyResult<Recipe> {
    Recipe::parse(text, Path::new(path)).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The recipe resolved, every default filled in, as TOML (a `ValueError` naming the key, the line
/// and the nearest valid key when it is not valid).
#[pyfunction]
#[pyo3(signature = (text: "str", path: "str") -> "str")]
pub(crate) fn recipe_check(text: &str, path: &str) -> PyResult<String> {
    Ok(parse(text, path)?.to_toml())
}

/// The recipe resolved, every default filled in, as JSON (the same validation as
/// [`recipe_check`]).
#[pyfunction]
#[pyo3(signature = (text: "str", path: "str") -> "str")]
pub(crate) fn recipe_json(text: &str, path: &str) -> PyResult<String> {
    json(&parse(text, path)?)
}

/// Whether the recipe's text writes `key` itself (dotted: `main.steps`), rather than leaving it to
/// its default (a PyTorch job lays the plan on its own step limit when `main.steps` is left).
#[pyfunction]
#[pyo3(signature = (text: "str", key: "str") -> "bool")]
pub(crate) fn recipe_gives(text: &str, key: &str) -> PyResult<bool> {
    let doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| PyValueError::new_err(e.to_string()))?;
    let mut at = Some(&doc);
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        let value = at.and_then(|t| t.get(part));
        if parts.peek().is_none() {
            return Ok(value.is_some());
        }
        at = value.and_then(toml::Value::as_table);
    }
    Ok(false)
}

/// The default recipe, every key commented.
#[pyfunction]
#[pyo3(signature = () -> "str")]
pub(crate) fn default_recipe() -> String {
    contrai_recipe::default_recipe()
}

/// The default recipe for a PyTorch job (`contrai recipe init --for hf`): `main.steps` left to
/// the job's own step limit.
#[pyfunction]
#[pyo3(signature = () -> "str")]
pub(crate) fn job_recipe() -> String {
    contrai_recipe::job_recipe()
}
