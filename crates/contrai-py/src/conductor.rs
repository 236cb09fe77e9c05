//! Binds the conductor: the lifecycle of one run, its turns, state and plan as Python objects.

use contrai_lifecycle::{Observation, RunInfo};
use contrai_run::MetricsRow;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::convert::{bad_json, py_value};
use crate::recipe;

/// The lifecycle of one run (see `contrai-lifecycle`): observations in, turns out, as JSON.
#[pyclass(module = "contrai._core")]
pub(crate) struct Conductor {
    inner: contrai_lifecycle::Conductor,
}

#[pymethods]
impl Conductor {
    /// A new run of the recipe `recipe_toml` (`recipe_path` names it in errors) for the run
    /// described by `info_json` (`{"train_samples", "classes", "weights", "heads"}`).
    #[new]
    #[pyo3(signature = (recipe_toml: "str", recipe_path: "str", info_json: "str"))]
    fn new(recipe_toml: &str, recipe_path: &str, info_json: &str) -> PyResult<Self> {
        let info = run_info(info_json)?;
        Ok(Conductor {
            inner: contrai_lifecycle::Conductor::new(recipe::parse(recipe_toml, recipe_path)?, info),
        })
    }

    /// A run resumed from a checkpoint's `state_json`, the live doctor rebuilt from
    /// `history_jsonl` (`metrics.jsonl` up to that checkpoint).
    #[staticmethod]
    #[pyo3(signature = (recipe_toml: "str", recipe_path: "str", info_json: "str", state_json: "str", history_jsonl: "str") -> "Conductor")]
    fn resume(
        recipe_toml: &str,
        recipe_path: &str,
        info_json: &str,
        state_json: &str,
        history_jsonl: &str,
    ) -> PyResult<Self> {
        let state = serde_json::from_str(state_json).map_err(|e| bad_json("conductor state", e))?;
        let history = history_jsonl
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| {
                MetricsRow::parse(l)
                    .map_err(|e| PyValueError::new_err(format!("history line {}: {e}", i + 1)))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let inner = contrai_lifecycle::Conductor::resume(
            recipe::parse(recipe_toml, recipe_path)?,
            run_info(info_json)?,
            state,
            &history,
        )
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(Conductor { inner })
    }

    /// The first turn (a `protocol.Turn`).
    #[pyo3(signature = () -> "Turn")]
    fn begin<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let turn = self
            .inner
            .begin()
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        py_value(py, &turn)
    }

    /// The next turn for an observation: an `Observation` in its serde form as Python objects
    /// (`{"Stepped": {"loss": nan, ...}}`), read directly rather than through JSON, which has no
    /// NaN or infinity for a failed step's loss or a diverged evaluation.
    #[pyo3(signature = (observation: "Observation") -> "Turn")]
    fn observe<'py>(
        &mut self,
        py: Python<'py>,
        observation: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let obs: Observation = pythonize::depythonize(observation)
            .map_err(|e| PyValueError::new_err(format!("observation: {e}")))?;
        let turn = self
            .inner
            .observe(obs)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        py_value(py, &turn)
    }

    /// The conductor's state (what a checkpoint saves, a `protocol.State`).
    #[pyo3(signature = () -> "State")]
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py_value(py, self.inner.state())
    }

    /// `plan.json` as the run now stands.
    #[pyo3(signature = () -> "RunPlan")]
    fn plan<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py_value(py, &self.inner.plan())
    }

    /// Steps each phase plans: `{"validate", "main", "contract", "refine"}`.
    #[pyo3(signature = () -> "dict[str, int]")]
    fn phase_steps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py_value(py, &self.inner.phase_steps())
    }

    /// The recipe in force, resolved, as TOML.
    #[pyo3(signature = () -> "str")]
    fn recipe_toml(&self) -> String {
        self.inner.recipe().to_toml()
    }
}

fn run_info(text: &str) -> PyResult<RunInfo> {
    serde_json::from_str(text).map_err(|e| bad_json("run info", e))
}
