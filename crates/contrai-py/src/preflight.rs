//! Binds the pre-flight check: a job's facts in, its findings out; the facts a recipe states.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::convert::py_value;
use crate::recipe;

/// The pre-flight check (`contrai_lifecycle::preflight`, the rules `contrai check` applies): a
/// job's facts (a `protocol.JobFacts` as Python objects) in, its findings
/// (`protocol.PreflightFinding`s) out; a `ValueError` for facts of the wrong form.
#[pyfunction]
#[pyo3(signature = (facts: "JobFacts") -> "list[PreflightFinding]")]
pub(crate) fn preflight<'py>(py: Python<'py>, facts: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let facts: contrai_lifecycle::preflight::JobFacts =
        pythonize::depythonize(facts).map_err(|e| PyValueError::new_err(format!("job facts: {e}")))?;
    py_value(py, &contrai_lifecycle::preflight::check(&facts))
}

/// What a recipe says of its own main phase (`JobFacts::from_recipe`: the schedule, batch,
/// checkpoint cadence, split shares), as a `protocol.JobFacts`: a PyTorch job's callbacks judge
/// the schedule and cadence the conductor imposes by it.
#[pyfunction]
#[pyo3(signature = (text: "str", path: "str") -> "JobFacts")]
pub(crate) fn recipe_facts<'py>(py: Python<'py>, text: &str, path: &str) -> PyResult<Bound<'py, PyAny>> {
    let recipe = recipe::parse(text, path)?;
    py_value(py, &contrai_lifecycle::preflight::JobFacts::from_recipe(&recipe))
}
