//! Binds the doctor and the report of a log file or run directory.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::convert::json;

/// The doctor's report of a log file or run directory (any format `contrai doctor` reads), as
/// JSON: one entry a run with its verdict and findings.
#[pyfunction]
#[pyo3(signature = (path: "str | PathLike[str]") -> "str")]
pub(crate) fn doctor(path: PathBuf) -> PyResult<String> {
    use contrai_doctor::{DoctorConfig, diagnose, read_path};
    let runs = read_path(&path, None).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let reports: Vec<_> = runs
        .iter()
        .map(|r| diagnose(r, &DoctorConfig::default()))
        .collect();
    json(&reports)
}

/// The self-contained HTML report of a log file or run directory.
#[pyfunction]
#[pyo3(signature = (path: "str | PathLike[str]") -> "str")]
pub(crate) fn report(path: PathBuf) -> PyResult<String> {
    contrai_report::render(&path, None).map_err(|e| PyValueError::new_err(e.to_string()))
}
