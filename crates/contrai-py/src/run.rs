//! Binds the run directory: its writer (`RunWriter`) and its one-writer lock (`RunLock`).

use std::path::{Path, PathBuf};

use contrai_run::{Decision, JsonLines, MetricsRow, QuarantineEntry, QuarantineLog, RunDir, RunFormat};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::convert::bad_json;

/// A run-directory error as a Python exception.
fn run_err(e: contrai_run::RunError) -> PyErr {
    match e {
        contrai_run::RunError::Io { .. } => PyOSError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// Writes a run directory in Contrai's format: `run.json`, `metrics.jsonl`, `decisions.jsonl`,
/// `quarantine.jsonl` and the JSON files, each row checked against its type before it is written.
#[pyclass(module = "contrai._core")]
pub(crate) struct RunWriter {
    run: RunDir,
    metrics: JsonLines,
    decisions: JsonLines,
    quarantine: QuarantineLog,
}

#[pymethods]
impl RunWriter {
    /// Opens `run_dir` (created if needed; `run.json` stamped with `writer`, or checked) with the
    /// journals cut back to `metrics_len` and `decisions_len` bytes (0 and 0: a new run), and
    /// `quarantine.jsonl` to `quarantine_len` (`None`: kept whole).
    #[new]
    #[pyo3(signature = (run_dir: "str | PathLike[str]", writer: "str", metrics_len: "int" = 0, decisions_len: "int" = 0, quarantine_len: "int | None" = None))]
    fn new(
        run_dir: PathBuf,
        writer: &str,
        metrics_len: u64,
        decisions_len: u64,
        quarantine_len: Option<u64>,
    ) -> PyResult<Self> {
        let run = RunDir::new(run_dir);
        std::fs::create_dir_all(run.path())
            .map_err(|e| PyOSError::new_err(format!("{}: {e}", run.path().display())))?;
        RunFormat::stamp(&run, writer).map_err(run_err)?;
        Ok(RunWriter {
            metrics: JsonLines::open(&run.metrics(), metrics_len).map_err(run_err)?,
            decisions: JsonLines::open(&run.decisions(), decisions_len).map_err(run_err)?,
            quarantine: QuarantineLog::open(&run, quarantine_len).map_err(run_err)?,
            run,
        })
    }

    /// Appends a spike's batch to `quarantine.jsonl` (JSON of a `QuarantineEntry`).
    #[pyo3(signature = (entry_json: "str") -> "None")]
    fn quarantine(&mut self, entry_json: &str) -> PyResult<()> {
        let e: QuarantineEntry =
            serde_json::from_str(entry_json).map_err(|e| bad_json("quarantine entry", e))?;
        self.quarantine.write(&e).map_err(run_err)
    }

    /// Bytes of `quarantine.jsonl` written so far (a checkpoint records it to cut back to).
    #[pyo3(signature = () -> "int")]
    fn quarantine_len(&self) -> u64 {
        self.quarantine.len()
    }

    /// Appends a metrics row (JSON of a training, evaluation or sparsity row).
    #[pyo3(signature = (row_json: "str") -> "None")]
    fn metric(&mut self, row_json: &str) -> PyResult<()> {
        let row =
            MetricsRow::parse(row_json).map_err(|e| PyValueError::new_err(format!("metrics row: {e}")))?;
        self.metrics.write(&row).map_err(run_err)
    }

    /// Appends a decision (JSON of a `Decision`).
    #[pyo3(signature = (decision_json: "str") -> "None")]
    fn decide(&mut self, decision_json: &str) -> PyResult<()> {
        let d: Decision = serde_json::from_str(decision_json).map_err(|e| bad_json("decision", e))?;
        self.decisions.write(&d).map_err(run_err)
    }

    /// Forces the journals to disk; the lengths in bytes of `metrics.jsonl` and `decisions.jsonl`
    /// (what a checkpoint records; `quarantine_len` gives the third).
    #[pyo3(signature = () -> "tuple[int, int]")]
    fn sync(&self) -> PyResult<(u64, u64)> {
        self.metrics.sync().map_err(run_err)?;
        self.decisions.sync().map_err(run_err)?;
        self.quarantine.sync().map_err(run_err)?;
        Ok((self.metrics.len(), self.decisions.len()))
    }

    /// Writes `plan.json`, `final/eval.json` or `final/model-card.json` (`kind` `plan`, `eval`,
    /// `model_card`) atomically, after checking the JSON against its type.
    #[pyo3(signature = (kind: "str", value_json: "str") -> "None")]
    fn write(&self, kind: &str, value_json: &str) -> PyResult<()> {
        let r = &self.run;
        match kind {
            "plan" => typed::<contrai_run::RunPlan>(value_json, &r.plan()),
            "eval" => typed::<contrai_run::FinalEval>(value_json, &r.eval()),
            "model_card" => typed::<contrai_run::ModelCard>(value_json, &r.model_card()),
            other => Err(PyValueError::new_err(format!(
                "`{other}`: expected plan, eval or model_card"
            ))),
        }
    }

    /// `metrics.jsonl` up to `length` bytes (a resume rebuilds the live doctor from it).
    #[pyo3(signature = (length: "int") -> "str")]
    fn history(&self, length: u64) -> PyResult<String> {
        let rows = contrai_run::read_jsonl(&self.run.metrics(), Some(length), |l| Ok(l.to_string()))
            .map_err(run_err)?;
        Ok(rows.into_iter().map(|(_, l)| l + "\n").collect())
    }

    /// The run directory.
    #[pyo3(signature = () -> "Path")]
    fn path(&self) -> PathBuf {
        self.run.path().to_path_buf()
    }
}

/// Writes `text` to `path` after checking it is a `T`.
fn typed<T: serde::Serialize + serde::de::DeserializeOwned>(text: &str, path: &Path) -> PyResult<()> {
    let v: T = serde_json::from_str(text).map_err(|e| bad_json(&path.display().to_string(), e))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| PyOSError::new_err(format!("{}: {e}", dir.display())))?;
    }
    contrai_run::write_json(path, &v).map_err(run_err)
}

/// One writer per run directory: the OS lock the CLI takes (`contrai_base::DirLock`), held until
/// `release()` or the process ends, however it ends.
#[pyclass(module = "contrai._core")]
pub(crate) struct RunLock {
    lock: Option<contrai_data::DirLock>,
}

#[pymethods]
impl RunLock {
    /// Locks `dir` (created if missing), or raises `OSError` naming the process that holds it;
    /// temporary files an interrupted writer left there are removed (said on the log).
    #[new]
    #[pyo3(signature = (dir: "str | PathLike[str]"))]
    fn new(dir: PathBuf) -> PyResult<Self> {
        let lock = contrai_data::DirLock::acquire(&dir).map_err(|e| PyOSError::new_err(e.to_string()))?;
        for path in lock.removed() {
            println!("[contrai] {}", contrai_data::lock::removed_note(path));
        }
        Ok(RunLock { lock: Some(lock) })
    }

    /// Lets the directory go.
    #[pyo3(signature = () -> "None")]
    fn release(&mut self) {
        self.lock = None;
    }
}
