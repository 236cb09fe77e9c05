//! Conversions the bindings share: JSON text and Python objects in and out, and their errors.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// A JSON text that is not the form expected.
pub(crate) fn bad_json(what: &str, e: serde_json::Error) -> PyErr {
    PyValueError::new_err(format!("{what}: {e}"))
}

/// A value as Python objects in its serde form (the typed protocol of `contrai.protocol`).
pub(crate) fn py_value<'py, T: serde::Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, v).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// JSON text of a value (our own types always serialise).
pub(crate) fn json<T: serde::Serialize>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}
