//! Binds the checkpoint envelope: `Checkpoints`, `PendingCheckpoint`, sealing and verification.

use std::path::{Path, PathBuf};

use contrai_run::envelope::{self, Kind, Pending, Sealed};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

pyo3::create_exception!(
    contrai._core,
    CorruptCheckpoint,
    pyo3::exceptions::PyRuntimeError,
    "A checkpoint's files do not match the sums of its envelope."
);

/// A checkpoint-envelope error as a Python exception: a file that fails its sum (or is missing
/// from it) a `CorruptCheckpoint`, the rest an `OSError`.
fn envelope_err(e: contrai_run::RunError) -> PyErr {
    match e {
        contrai_run::RunError::Corrupt { .. } => CorruptCheckpoint::new_err(e.to_string()),
        _ => PyOSError::new_err(e.to_string()),
    }
}

/// `"step"` (scheduled) or `"stop"`.
fn checkpoint_kind(kind: &str) -> PyResult<Kind> {
    match kind {
        "step" => Ok(Kind::Scheduled),
        "stop" => Ok(Kind::Stop),
        other => Err(PyValueError::new_err(format!(
            "checkpoint kind `{other}`: expected step or stop"
        ))),
    }
}

/// The checkpoint envelope of one run's `checkpoints/` (`contrai_run::envelope`, the one the
/// Burn engine writes): layout, `SHA256SUMS`, atomic placement, keep-last and verification. The
/// PyTorch engine writes only its own files into it.
#[pyclass(module = "contrai._core")]
pub(crate) struct Checkpoints {
    root: PathBuf,
}

#[pymethods]
impl Checkpoints {
    #[new]
    #[pyo3(signature = (root: "str | PathLike[str]"))]
    fn new(root: PathBuf) -> Self {
        Checkpoints { root }
    }

    /// Starts the checkpoint of `step` (`kind` `step` or `stop`): a temporary directory to write
    /// files into, sealed and placed by `commit`.
    #[pyo3(signature = (step: "int", kind: "str" = "step") -> "PendingCheckpoint")]
    fn begin(&self, step: u64, kind: &str) -> PyResult<PendingCheckpoint> {
        let pending = Pending::begin(&self.root, checkpoint_kind(kind)?, step).map_err(envelope_err)?;
        Ok(PendingCheckpoint { inner: Some(pending) })
    }

    /// The directory of step `step`'s checkpoint of `kind`.
    #[pyo3(signature = (step: "int", kind: "str" = "step") -> "Path")]
    fn dir(&self, step: u64, kind: &str) -> PyResult<PathBuf> {
        Ok(self.root.join(checkpoint_kind(kind)?.dir_name(step)))
    }

    /// The steps that have a checkpoint of `kind`, oldest first.
    #[pyo3(signature = (kind: "str" = "step") -> "list[int]")]
    fn steps(&self, kind: &str) -> PyResult<Vec<u64>> {
        let kind = checkpoint_kind(kind)?;
        Ok(envelope::list(&self.root, kind)
            .into_iter()
            .map(|(s, _)| s)
            .collect())
    }

    /// Checks every file of step `step`'s checkpoint against its sums; its `state.json` text
    /// (`CorruptCheckpoint` when a file does not match).
    #[pyo3(signature = (step: "int", kind: "str" = "step") -> "str")]
    fn verify(&self, step: u64, kind: &str) -> PyResult<String> {
        verified_state(&self.root.join(checkpoint_kind(kind)?.dir_name(step))).map_err(envelope_err)
    }

    /// The newest scheduled checkpoint whose files match their sums — of a step below `below`
    /// when one is, else of the rest: `(step, state.json text, the steps passed over)`, or `None`
    /// with the steps passed over.
    #[pyo3(signature = (below: "int | None" = None) -> "tuple[tuple[int, str] | None, list[int]]")]
    fn latest(&self, below: Option<u64>) -> (Option<(u64, String)>, Vec<u64>) {
        let below = below.unwrap_or(u64::MAX);
        let (found, refused) = envelope::latest_below(&self.root, &[Kind::Scheduled], below, |step, dir| {
            verified_state(dir).map(|state| (step, state))
        });
        (found, refused.into_iter().map(|(s, ..)| s).collect())
    }

    /// Keeps the newest `keep_last` scheduled checkpoints and the steps in `keep`; removes the
    /// rest and every stop checkpoint.
    #[pyo3(signature = (keep_last: "int", keep: "list[int]") -> "None")]
    fn keep_last(&self, keep_last: usize, keep: Vec<u64>) -> PyResult<()> {
        envelope::keep_last(&self.root, keep_last, &keep).map_err(envelope_err)
    }

    /// Removes the checkpoints newer than `step` and leftover temporaries.
    #[pyo3(signature = (step: "int") -> "None")]
    fn discard_after(&self, step: u64) -> PyResult<()> {
        envelope::discard_after(&self.root, step).map_err(envelope_err)
    }
}

/// A checkpoint's `state.json` text after every file passed its sum.
fn verified_state(dir: &Path) -> contrai_run::Result<String> {
    let sealed = Sealed::open(dir)?;
    sealed.verify()?;
    let state = sealed.state()?;
    String::from_utf8(state).map_err(|_| contrai_run::RunError::Corrupt {
        path: dir.join(envelope::STATE),
        message: "not UTF-8 text".into(),
    })
}

/// A checkpoint being written (`Checkpoints.begin`).
#[pyclass(module = "contrai._core")]
pub(crate) struct PendingCheckpoint {
    inner: Option<Pending>,
}

impl PendingCheckpoint {
    fn pending(&mut self) -> PyResult<&mut Pending> {
        self.inner.as_mut().ok_or_else(committed)
    }
}

/// The error of a checkpoint used after its commit.
fn committed() -> PyErr {
    PyRuntimeError::new_err("this checkpoint was committed already")
}

#[pymethods]
impl PendingCheckpoint {
    /// The temporary directory to write the engine's files into.
    #[pyo3(signature = () -> "Path")]
    fn path(&mut self) -> PyResult<PathBuf> {
        Ok(self.pending()?.path().to_path_buf())
    }

    /// Writes `data` as the file `name` (forced to disk).
    #[pyo3(signature = (name: "str", data: "bytes") -> "None")]
    fn add(&mut self, name: &str, data: &[u8]) -> PyResult<()> {
        self.pending()?.add(name, data).map_err(envelope_err)
    }

    /// Seals (every file forced to disk, `SHA256SUMS` written) and places the checkpoint; its
    /// directory.
    #[pyo3(signature = () -> "Path")]
    fn commit(&mut self) -> PyResult<PathBuf> {
        let pending = self.inner.take().ok_or_else(committed)?;
        pending.commit().map_err(envelope_err)
    }
}

/// Seals a checkpoint directory a framework wrote (a Hugging Face `checkpoint-N`, Contrai's
/// files added): `SHA256SUMS` over every file in it, written atomically; its path.
#[pyfunction]
#[pyo3(signature = (dir: "str | PathLike[str]") -> "Path")]
pub(crate) fn seal(dir: PathBuf) -> PyResult<PathBuf> {
    envelope::seal(&dir).map_err(envelope_err)
}

/// Checks every file a sealed directory lists against its sum (`CorruptCheckpoint` when one does
/// not match, is missing, or the directory was never sealed).
#[pyfunction]
#[pyo3(signature = (dir: "str | PathLike[str]") -> "None")]
pub(crate) fn verify(dir: PathBuf) -> PyResult<()> {
    Sealed::open(&dir).and_then(|s| s.verify()).map_err(envelope_err)
}

/// A checkpoint record read back (`state.json`, a framework checkpoint's `contrai.json` or
/// callback state, as Python objects): a format this version reads, every field checked — an
/// error names `source` and the field —, returned in its serde form with defaults filled in
/// (`contrai_lifecycle::CheckpointRecord`, typed in `protocol.py`).
#[pyfunction]
#[pyo3(signature = (record: "Any", source: "str") -> "CheckpointRecord")]
pub(crate) fn checkpoint_record<'py>(
    py: Python<'py>,
    record: &Bound<'py, PyAny>,
    source: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let value: serde_json::Value =
        pythonize::depythonize(record).map_err(|e| PyValueError::new_err(format!("{source}: {e}")))?;
    let parsed = contrai_lifecycle::CheckpointRecord::parse(value, source)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    crate::convert::py_value(py, &parsed)
}

/// Puts a finished file or folder `tmp` (written beside `dest`) in `dest`'s place: its files
/// forced to disk, one rename (a folder swapped with the old, which goes after), the folder
/// synced — a crash leaves the old `dest` or the new one whole (`contrai_base::put_in_place`,
/// the rule every writer of the workspace follows).
#[pyfunction]
#[pyo3(signature = (tmp: "str | PathLike[str]", dest: "str | PathLike[str]") -> "None")]
pub(crate) fn put_in_place(tmp: PathBuf, dest: PathBuf) -> PyResult<()> {
    contrai_base::put_in_place(&tmp, &dest).map_err(|e| PyOSError::new_err(e.to_string()))
}
