//! `contrai._core`: the Rust core of Contrai's Python package. The conductor (its turns, state and
//! observations as Python objects in their serde forms, typed by the generated
//! `contrai.protocol`), the run-directory writer and checkpoint envelope, the mask selection, the
//! doctor, the data stage and the report; `python/contrai` wraps them.
//!
//! Errors become Python exceptions: a recipe problem a `ValueError` naming the file, line, key
//! and nearest valid key; a file problem an `OSError`; a protocol slip a `RuntimeError`.

use std::path::{Path, PathBuf};

use contrai_lifecycle::{Observation, RunInfo, Target};
use contrai_recipe::Recipe;
use contrai_run::checkpoint::{self, Kind, Pending, Sealed};
use contrai_run::{Decision, JsonLines, MetricsRow, QuarantineEntry, QuarantineLog, RunDir, RunFormat};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A JSON text that is not the form expected.
fn bad_json(what: &str, e: serde_json::Error) -> PyErr {
    PyValueError::new_err(format!("{what}: {e}"))
}

/// A value as Python objects in its serde form (the typed protocol of `contrai.protocol`).
fn py_value<'py, T: serde::Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, v).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// JSON text of a value (our own types always serialise).
fn json<T: serde::Serialize>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// A run-directory error as a Python exception.
fn run_err(e: contrai_run::RunError) -> PyErr {
    match e {
        contrai_run::RunError::Io { .. } => PyOSError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// Parses and validates recipe text (`path` names it in errors).
fn recipe(text: &str, path: &str) -> PyResult<Recipe> {
    Recipe::parse(text, Path::new(path)).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The recipe resolved, every default filled in, as TOML (a `ValueError` naming the key, the line
/// and the nearest valid key when it is not valid).
#[pyfunction]
fn recipe_check(text: &str, path: &str) -> PyResult<String> {
    Ok(recipe(text, path)?.to_toml())
}

/// The recipe resolved, every default filled in, as JSON (the same validation as
/// [`recipe_check`]).
#[pyfunction]
fn recipe_json(text: &str, path: &str) -> PyResult<String> {
    json(&recipe(text, path)?)
}

/// Whether the recipe's text writes `key` itself (dotted: `main.steps`), rather than leaving it to
/// its default (a PyTorch job lays the plan on its own step limit when `main.steps` is left).
#[pyfunction]
fn recipe_gives(text: &str, key: &str) -> PyResult<bool> {
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
fn default_recipe() -> String {
    contrai_recipe::default_recipe()
}

/// The default recipe for a PyTorch job (`contrai recipe init --for hf`): `main.steps` left to
/// the job's own step limit.
#[pyfunction]
fn job_recipe() -> String {
    contrai_recipe::job_recipe()
}

/// The lifecycle of one run (see `contrai-lifecycle`): observations in, turns out, as JSON.
#[pyclass(module = "contrai._core")]
struct Conductor {
    inner: contrai_lifecycle::Conductor,
}

#[pymethods]
impl Conductor {
    /// A new run of the recipe `recipe_toml` (`recipe_path` names it in errors) for the run
    /// described by `info_json` (`{"train_samples", "classes", "weights", "heads"}`).
    #[new]
    fn new(recipe_toml: &str, recipe_path: &str, info_json: &str) -> PyResult<Self> {
        let info = run_info(info_json)?;
        Ok(Conductor {
            inner: contrai_lifecycle::Conductor::new(recipe(recipe_toml, recipe_path)?, info),
        })
    }

    /// A run resumed from a checkpoint's `state_json`, the live doctor rebuilt from
    /// `history_jsonl` (`metrics.jsonl` up to that checkpoint).
    #[staticmethod]
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
            recipe(recipe_toml, recipe_path)?,
            run_info(info_json)?,
            state,
            &history,
        )
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(Conductor { inner })
    }

    /// The first turn (a `protocol.Turn`).
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
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py_value(py, self.inner.state())
    }

    /// `plan.json` as the run now stands.
    fn plan<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py_value(py, &self.inner.plan())
    }

    /// Steps each phase plans: `{"validate", "main", "contract", "refine"}`.
    fn phase_steps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py_value(py, &self.inner.phase_steps())
    }

    /// The recipe in force, resolved, as TOML.
    fn recipe_toml(&self) -> String {
        self.inner.recipe().to_toml()
    }
}

fn run_info(text: &str) -> PyResult<RunInfo> {
    serde_json::from_str(text).map_err(|e| bad_json("run info", e))
}

/// Writes a run directory in Contrai's format: `run.json`, `metrics.jsonl`, `decisions.jsonl`,
/// `quarantine.jsonl` and the JSON files, each row checked against its type before it is written.
#[pyclass(module = "contrai._core")]
struct RunWriter {
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
    #[pyo3(signature = (run_dir, writer, metrics_len = 0, decisions_len = 0, quarantine_len = None))]
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
    fn quarantine(&mut self, entry_json: &str) -> PyResult<()> {
        let e: QuarantineEntry =
            serde_json::from_str(entry_json).map_err(|e| bad_json("quarantine entry", e))?;
        self.quarantine.write(&e).map_err(run_err)
    }

    /// Bytes of `quarantine.jsonl` written so far (a checkpoint records it to cut back to).
    fn quarantine_len(&self) -> u64 {
        self.quarantine.len()
    }

    /// Appends a metrics row (JSON of a training, evaluation or sparsity row).
    fn metric(&mut self, row_json: &str) -> PyResult<()> {
        let row =
            MetricsRow::parse(row_json).map_err(|e| PyValueError::new_err(format!("metrics row: {e}")))?;
        self.metrics.write(&row).map_err(run_err)
    }

    /// Appends a decision (JSON of a `Decision`).
    fn decide(&mut self, decision_json: &str) -> PyResult<()> {
        let d: Decision = serde_json::from_str(decision_json).map_err(|e| bad_json("decision", e))?;
        self.decisions.write(&d).map_err(run_err)
    }

    /// Forces the journals to disk; the lengths in bytes of `metrics.jsonl` and `decisions.jsonl`
    /// (what a checkpoint records; `quarantine_len` gives the third).
    fn sync(&self) -> PyResult<(u64, u64)> {
        self.metrics.sync().map_err(run_err)?;
        self.decisions.sync().map_err(run_err)?;
        self.quarantine.sync().map_err(run_err)?;
        Ok((self.metrics.len(), self.decisions.len()))
    }

    /// Writes `plan.json`, `final/eval.json` or `final/model-card.json` (`kind` `plan`, `eval`,
    /// `model_card`) atomically, after checking the JSON against its type.
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
    fn history(&self, length: u64) -> PyResult<String> {
        let rows = contrai_run::read_jsonl(&self.run.metrics(), Some(length), |l| Ok(l.to_string()))
            .map_err(run_err)?;
        Ok(rows.into_iter().map(|(_, l)| l + "\n").collect())
    }

    /// The run directory.
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

/// The doctor's report of a log file or run directory (any format `contrai doctor` reads), as
/// JSON: one entry a run with its verdict and findings.
#[pyfunction]
fn doctor(path: PathBuf) -> PyResult<String> {
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
fn report(path: PathBuf) -> PyResult<String> {
    contrai_report::render(&path, None).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// How to read a data file: its text and label fields, `id` when present.
fn audit_config(text: &str, label: &str) -> contrai_data::AuditConfig {
    contrai_data::AuditConfig {
        fields: contrai_data::FieldSpec {
            text: text.into(),
            label: Some(label.into()),
            id: Some("id".into()),
            explicit: false,
        },
        ..contrai_data::AuditConfig::default()
    }
}

/// A data file as a source: its format from the extension; `columns` names the columns of a
/// CSV/TSV file without a header row.
fn data_source(path: &Path, columns: Option<Vec<String>>) -> PyResult<contrai_data::Source> {
    contrai_data::Source::file(path, None)
        .and_then(|s| s.headerless(&columns.unwrap_or_default()))
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The data audit of a JSONL/CSV/TSV/Parquet file (duplicates, near-duplicates, label
/// conflicts, outliers, balance), as JSON.
#[pyfunction]
#[pyo3(signature = (path, text = "text", label = "label", columns = None))]
fn audit(path: PathBuf, text: &str, label: &str, columns: Option<Vec<String>>) -> PyResult<String> {
    use contrai_data::{Audit, Silent};
    let source = data_source(&path, columns)?;
    let audit = Audit::run(vec![source], audit_config(text, label), &Silent)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    json(&audit.report())
}

/// Splits a file into train, val and holdout partitions under `out` with no sample, and no
/// near-duplicate of one, in two partitions (exact duplicates dropped, conflicting labels
/// dropped); returns the manifest as JSON. With `parent` (an earlier split's directory) it is a
/// new version of that split: old samples stay where they were, its settings are the defaults.
#[pyfunction]
#[pyo3(signature = (path, out, ratios = None, seed = None, text = None, label = None, columns = None,
                    parent = None, allow_shrink = false, force = false, keep_previous = false))]
#[allow(clippy::too_many_arguments)]
fn split(
    path: PathBuf,
    out: PathBuf,
    ratios: Option<(f64, f64, f64)>,
    seed: Option<u64>,
    text: Option<&str>,
    label: Option<&str>,
    columns: Option<Vec<String>>,
    parent: Option<PathBuf>,
    allow_shrink: bool,
    force: bool,
    keep_previous: bool,
) -> PyResult<String> {
    use contrai_data::Silent;
    use contrai_data::split::SplitConfig;
    let err = |e: contrai_data::DataError| PyValueError::new_err(e.to_string());
    let source = data_source(&path, columns)?;
    let mut cfg = match parent.as_deref() {
        Some(dir) => contrai_data::parent::settings(dir).map_err(err)?,
        None => SplitConfig::default(),
    };
    cfg.ratios = ratios.map_or(cfg.ratios, |r| [r.0, r.1, r.2]);
    cfg.seed = seed.unwrap_or(cfg.seed);
    if let Some(t) = text {
        cfg.audit.fields.text = t.into();
    }
    if let Some(l) = label {
        cfg.audit.fields.label = Some(l.into());
    }
    cfg.parent = parent;
    cfg.allow_shrink = allow_shrink;
    cfg.existing = match (force, keep_previous) {
        (_, true) => contrai_data::commit::Existing::KeepPrevious,
        (true, false) => contrai_data::commit::Existing::Replace,
        (false, false) => contrai_data::commit::Existing::Refuse,
    };
    let outcome = contrai_data::split::split(source, &out, &cfg, &Silent).map_err(err)?;
    json(&outcome.manifest)
}

/// The near-copy configuration of the sharded audit: the audit's defaults with these parameters.
fn near_config(num_perm: usize, threshold: f64, edit_share: f64) -> PyResult<contrai_data::IndexConfig> {
    let cfg = contrai_data::IndexConfig {
        num_perm,
        threshold,
        ..contrai_data::IndexConfig::default()
    }
    .with_edit_share(edit_share);
    cfg.validate().map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(cfg)
}

/// Salts that keep equal key values of different key groups apart once every group's keys share
/// one column (a 64-bit coincidence across groups only adds a candidate, which verification drops).
const GROUP_SALT: u64 = 0x9E37_79B9_7F4A_7C15;

/// A text's words (hashed, in order) and its sorted shingles: what verification reads.
type Fingerprint = (Vec<u64>, Vec<u64>);

/// What the audit's first pass computes of each text, for engines that shard it (Ray Data),
/// exactly as `contrai data audit` computes it, in buffers Arrow takes without a copy a value:
/// the normalised texts' xxh3-128 (16 little-endian bytes each), their words (u32 LE), their
/// candidate keys (u64 LE, `keys` a text, each salted by its group, 0 where a text has none),
/// the votes a shared key of each slot gives a pair (a pair needs 2), and with `fingerprints`
/// each text's words and shingles.
#[pyfunction]
#[pyo3(signature = (texts, num_perm = 256, threshold = 0.8, edit_share = 0.05, fingerprints = false))]
#[allow(clippy::type_complexity)]
fn signatures<'py>(
    py: Python<'py>,
    texts: Vec<Option<String>>,
    num_perm: usize,
    threshold: f64,
    edit_share: f64,
    fingerprints: bool,
) -> PyResult<(
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Vec<u32>,
    Vec<Fingerprint>,
)> {
    use contrai_data::index::Signer;
    use rayon::prelude::*;
    let signer = Signer::new(&near_config(num_perm, threshold, edit_share)?);
    let layout = signer.layout();
    let group_of = layout.group_of_slots();
    let groups = layout.groups();
    let votes: Vec<u32> = group_of
        .iter()
        .map(|&g| if groups[g].1.is_some() { 1 } else { 2 })
        .collect();
    let signed: Vec<_> = py.detach(|| {
        texts
            .par_iter()
            .map(|t| signer.sign(t.as_deref().unwrap_or_default()))
            .collect()
    });
    let (mut content, mut words, mut keys) = (Vec::new(), Vec::new(), Vec::new());
    let mut prints = Vec::new();
    for s in signed {
        content.extend_from_slice(&s.content.to_le_bytes());
        words.extend_from_slice(&s.words.to_le_bytes());
        for (key, &g) in s.keys.iter().zip(&group_of) {
            let salted = if *key == 0 {
                0
            } else {
                (key ^ (g as u64).wrapping_mul(GROUP_SALT)).max(1)
            };
            keys.extend_from_slice(&salted.to_le_bytes());
        }
        if fingerprints {
            let f = s.fingerprint.settled();
            prints.push((f.words, f.shingles));
        }
    }
    Ok((
        PyBytes::new(py, &content),
        PyBytes::new(py, &words),
        PyBytes::new(py, &keys),
        votes,
        prints,
    ))
}

/// The candidate pairs among the texts that share one key, as the audit pairs them: each later
/// member of a text with its first (`exact`), the first members of different texts with each
/// other — for a key of rule 1's bands (`votes` 1) only those within the edit budget. Rows:
/// (id, id, exact, votes).
#[pyfunction]
#[pyo3(signature = (ids, contents, words, votes, edit_share = 0.05))]
fn key_pairs(
    ids: Vec<String>,
    contents: Vec<Vec<u8>>,
    words: Vec<u32>,
    votes: u32,
    edit_share: f64,
) -> PyResult<Vec<(String, String, bool, u32)>> {
    let cfg = near_config(256, 0.8, edit_share)?;
    let window = if votes < 2 { cfg.edits } else { None };
    let mut first: std::collections::HashMap<&[u8], usize> = std::collections::HashMap::new();
    let mut out = Vec::new();
    let mut reps: Vec<(u32, u32)> = Vec::new();
    for (i, c) in contents.iter().enumerate() {
        match first.get(c.as_slice()) {
            Some(&f) if ids[f] != ids[i] => out.push((ids[f].clone(), ids[i].clone(), true, 2)),
            Some(_) => {}
            None => {
                first.insert(c, i);
                reps.push((words.get(i).copied().unwrap_or(0), i as u32));
            }
        }
    }
    reps.sort_unstable();
    for (a, b) in contrai_data::index::pairs_within(&reps, window) {
        out.push((ids[a as usize].clone(), ids[b as usize].clone(), false, votes));
    }
    Ok(out)
}

/// Whether each pair of fingerprints (from `signatures(..., fingerprints=True)`) are near-copies
/// by the audit's definition: the verification of candidates.
#[pyfunction]
#[pyo3(signature = (pairs, threshold = 0.8, edit_share = 0.05))]
fn near_pairs(
    pairs: Vec<(Fingerprint, Fingerprint)>,
    threshold: f64,
    edit_share: f64,
) -> PyResult<Vec<bool>> {
    let near = near_config(256, threshold, edit_share)?.near_copy();
    let print = |(words, shingles): &Fingerprint| contrai_data::near::Fingerprint {
        words: words.clone(),
        shingles: shingles.clone(),
    };
    Ok(pairs
        .iter()
        .map(|(a, b)| near.judge(&print(a), &print(b)).is_some())
        .collect())
}

/// The module a weight belongs to, as the conductor names it (`blocks.0.attn.query.weight` →
/// `blocks.0.attn`).
#[pyfunction]
fn module_of(path: &str) -> String {
    contrai_lifecycle::prune::module_of(path)
}

/// The matrices among `weights` that the recipe's `contract.prune` rules select, in their order
/// (a LoRA job's merged model trains them through contraction).
#[pyfunction]
fn pruned_weights(text: &str, path: &str, weights: Vec<String>) -> PyResult<Vec<String>> {
    let r = recipe(text, path)?;
    let prunable = contrai_lifecycle::prune::Prunable::new(&r.contract.prune, &weights);
    Ok(prunable.paths().map(str::to_string).collect())
}

/// Whether a module is attention, as the conductor tells (capped one weight at a time; pruned by
/// whole heads when the recipe asks).
#[pyfunction]
fn is_attention(module: &str) -> bool {
    contrai_lifecycle::prune::is_attention(module)
}

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

/// The checkpoint envelope of one run's `checkpoints/` (`contrai_run::checkpoint`, the one the
/// Burn engine writes): layout, `SHA256SUMS`, atomic placement, keep-last and verification. The
/// PyTorch engine writes only its own files into it.
#[pyclass(module = "contrai._core")]
struct Checkpoints {
    root: PathBuf,
}

#[pymethods]
impl Checkpoints {
    #[new]
    fn new(root: PathBuf) -> Self {
        Checkpoints { root }
    }

    /// Starts the checkpoint of `step` (`kind` `step` or `stop`): a temporary directory to write
    /// files into, sealed and placed by `commit`.
    #[pyo3(signature = (step, kind = "step"))]
    fn begin(&self, step: u64, kind: &str) -> PyResult<PendingCheckpoint> {
        let pending = Pending::begin(&self.root, checkpoint_kind(kind)?, step).map_err(envelope_err)?;
        Ok(PendingCheckpoint { inner: Some(pending) })
    }

    /// The directory of step `step`'s checkpoint of `kind`.
    #[pyo3(signature = (step, kind = "step"))]
    fn dir(&self, step: u64, kind: &str) -> PyResult<PathBuf> {
        Ok(self.root.join(checkpoint_kind(kind)?.dir_name(step)))
    }

    /// The steps that have a checkpoint of `kind`, oldest first.
    #[pyo3(signature = (kind = "step"))]
    fn steps(&self, kind: &str) -> PyResult<Vec<u64>> {
        let kind = checkpoint_kind(kind)?;
        Ok(checkpoint::list(&self.root, kind)
            .into_iter()
            .map(|(s, _)| s)
            .collect())
    }

    /// Checks every file of step `step`'s checkpoint against its sums; its `state.json` text
    /// (`CorruptCheckpoint` when a file does not match).
    #[pyo3(signature = (step, kind = "step"))]
    fn verify(&self, step: u64, kind: &str) -> PyResult<String> {
        verified_state(&self.root.join(checkpoint_kind(kind)?.dir_name(step))).map_err(envelope_err)
    }

    /// The newest scheduled checkpoint whose files match their sums — of a step below `below`
    /// when one is, else of the rest: `(step, state.json text, the steps passed over)`, or `None`
    /// with the steps passed over.
    #[pyo3(signature = (below = None))]
    fn latest(&self, below: Option<u64>) -> (Option<(u64, String)>, Vec<u64>) {
        let below = below.unwrap_or(u64::MAX);
        let (found, refused) =
            checkpoint::latest_below(&self.root, &[Kind::Scheduled], below, |step, dir| {
                verified_state(dir).map(|state| (step, state))
            });
        (found, refused.into_iter().map(|(s, ..)| s).collect())
    }

    /// Keeps the newest `keep_last` scheduled checkpoints and the steps in `keep`; removes the
    /// rest and every stop checkpoint.
    fn keep_last(&self, keep_last: usize, keep: Vec<u64>) -> PyResult<()> {
        checkpoint::keep_last(&self.root, keep_last, &keep).map_err(envelope_err)
    }

    /// Removes the checkpoints newer than `step` and leftover temporaries.
    fn discard_after(&self, step: u64) -> PyResult<()> {
        checkpoint::discard_after(&self.root, step).map_err(envelope_err)
    }
}

/// A checkpoint's `state.json` text after every file passed its sum.
fn verified_state(dir: &Path) -> contrai_run::Result<String> {
    let sealed = Sealed::open(dir)?;
    sealed.verify()?;
    let state = sealed.state()?;
    String::from_utf8(state).map_err(|_| contrai_run::RunError::Corrupt {
        path: dir.join(checkpoint::STATE),
        message: "not UTF-8 text".into(),
    })
}

/// A checkpoint being written (`Checkpoints.begin`).
#[pyclass(module = "contrai._core")]
struct PendingCheckpoint {
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
    fn path(&mut self) -> PyResult<PathBuf> {
        Ok(self.pending()?.path().to_path_buf())
    }

    /// Writes `data` as the file `name` (forced to disk).
    fn add(&mut self, name: &str, data: &[u8]) -> PyResult<()> {
        self.pending()?.add(name, data).map_err(envelope_err)
    }

    /// Seals (every file forced to disk, `SHA256SUMS` written) and places the checkpoint; its
    /// directory.
    fn commit(&mut self) -> PyResult<PathBuf> {
        let pending = self.inner.take().ok_or_else(committed)?;
        pending.commit().map_err(envelope_err)
    }
}

/// Seals a checkpoint directory a framework wrote (a Hugging Face `checkpoint-N`, Contrai's
/// files added): `SHA256SUMS` over every file in it, written atomically; its path.
#[pyfunction]
fn seal(dir: PathBuf) -> PyResult<PathBuf> {
    checkpoint::seal(&dir).map_err(envelope_err)
}

/// Checks every file a sealed directory lists against its sum (`CorruptCheckpoint` when one does
/// not match, is missing, or the directory was never sealed).
#[pyfunction]
fn verify(dir: PathBuf) -> PyResult<()> {
    Sealed::open(&dir).and_then(|s| s.verify()).map_err(envelope_err)
}

/// One writer per run directory: the OS lock the CLI takes (`contrai_base::DirLock`), held until
/// `release()` or the process ends, however it ends.
#[pyclass(module = "contrai._core")]
struct RunLock {
    lock: Option<contrai_data::DirLock>,
}

#[pymethods]
impl RunLock {
    /// Locks `dir` (created if missing), or raises `OSError` naming the process that holds it;
    /// temporary files an interrupted writer left there are removed (said on the log).
    #[new]
    fn new(dir: PathBuf) -> PyResult<Self> {
        let lock = contrai_data::DirLock::acquire(&dir).map_err(|e| PyOSError::new_err(e.to_string()))?;
        for path in lock.removed() {
            println!("[contrai] {}", contrai_data::lock::removed_note(path));
        }
        Ok(RunLock { lock: Some(lock) })
    }

    /// Lets the directory go.
    fn release(&mut self) {
        self.lock = None;
    }
}

/// Keep masks of magnitude pruning, by the rule both engines share
/// (`contrai_lifecycle::select`): `pools` holds each module's scores (little-endian f32 bytes,
/// masked entries −1) with its target's sparsity and cap; `scope` is `module` or `global`.
/// Returns one byte an entry (1: kept) a module.
#[pyfunction]
fn magnitude_masks<'py>(
    py: Python<'py>,
    pools: Vec<(Vec<u8>, f64, f64)>,
    scope: &str,
) -> PyResult<Vec<Bound<'py, pyo3::types::PyBytes>>> {
    let scope: contrai_recipe::PruneScope = scope
        .parse()
        .map_err(|_| PyValueError::new_err(format!("scope `{scope}`: expected module or global")))?;
    let scores: Vec<Vec<f32>> = pools
        .iter()
        .map(|(b, ..)| {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
        .collect();
    let targets = pools.iter().map(|&(_, sparsity, cap)| Target { sparsity, cap });
    let scored: Vec<(&[f32], Target)> = scores.iter().map(Vec::as_slice).zip(targets).collect();
    Ok(contrai_lifecycle::select::magnitude_masks(&scored, scope)
        .into_iter()
        .map(|keep| {
            let bytes: Vec<u8> = keep.into_iter().map(u8::from).collect();
            pyo3::types::PyBytes::new(py, &bytes)
        })
        .collect())
}

/// Which groups of one structure (heads, units) pruning takes whole, by the rule both engines
/// share: each group's L2 norm and whether it is dead already in, one flag a group (true:
/// pruned) out.
#[pyfunction]
fn weakest_groups(norm: Vec<f64>, dead: Vec<bool>, sparsity: f64, cap: f64) -> PyResult<Vec<bool>> {
    if norm.len() != dead.len() {
        return Err(PyValueError::new_err(format!(
            "{} norms and {} dead flags",
            norm.len(),
            dead.len()
        )));
    }
    Ok(contrai_lifecycle::select::weakest_groups(
        &norm,
        &dead,
        Target { sparsity, cap },
    ))
}

/// The pre-flight check (`contrai_lifecycle::preflight`, the rules `contrai check` applies): a
/// job's facts (a `protocol.JobFacts` as Python objects) in, its findings
/// (`protocol.PreflightFinding`s) out; a `ValueError` for facts of the wrong form.
#[pyfunction]
fn preflight<'py>(py: Python<'py>, facts: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let facts: contrai_lifecycle::preflight::JobFacts =
        pythonize::depythonize(facts).map_err(|e| PyValueError::new_err(format!("job facts: {e}")))?;
    py_value(py, &contrai_lifecycle::preflight::check(&facts))
}

/// What a recipe says of its own main phase (`JobFacts::from_recipe`: the schedule, batch,
/// checkpoint cadence, split shares), as a `protocol.JobFacts`: a PyTorch job's callbacks judge
/// the schedule and cadence the conductor imposes by it.
#[pyfunction]
fn recipe_facts<'py>(py: Python<'py>, text: &str, path: &str) -> PyResult<Bound<'py, PyAny>> {
    let recipe = recipe(text, path)?;
    py_value(py, &contrai_lifecycle::preflight::JobFacts::from_recipe(&recipe))
}

/// The module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("RUN_FORMAT", contrai_run::FORMAT)?;
    m.add_class::<Conductor>()?;
    m.add_class::<RunWriter>()?;
    m.add_class::<Checkpoints>()?;
    m.add_class::<PendingCheckpoint>()?;
    m.add_class::<RunLock>()?;
    m.add_function(wrap_pyfunction!(seal, m)?)?;
    m.add_function(wrap_pyfunction!(signatures, m)?)?;
    m.add_function(wrap_pyfunction!(key_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(near_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add("CorruptCheckpoint", m.py().get_type::<CorruptCheckpoint>())?;
    m.add_function(wrap_pyfunction!(recipe_check, m)?)?;
    m.add_function(wrap_pyfunction!(recipe_json, m)?)?;
    m.add_function(wrap_pyfunction!(recipe_gives, m)?)?;
    m.add_function(wrap_pyfunction!(recipe_facts, m)?)?;
    m.add_function(wrap_pyfunction!(module_of, m)?)?;
    m.add_function(wrap_pyfunction!(is_attention, m)?)?;
    m.add_function(wrap_pyfunction!(pruned_weights, m)?)?;
    m.add_function(wrap_pyfunction!(magnitude_masks, m)?)?;
    m.add_function(wrap_pyfunction!(weakest_groups, m)?)?;
    m.add_function(wrap_pyfunction!(default_recipe, m)?)?;
    m.add_function(wrap_pyfunction!(job_recipe, m)?)?;
    m.add_function(wrap_pyfunction!(doctor, m)?)?;
    m.add_function(wrap_pyfunction!(report, m)?)?;
    m.add_function(wrap_pyfunction!(audit, m)?)?;
    m.add_function(wrap_pyfunction!(split, m)?)?;
    m.add_function(wrap_pyfunction!(preflight, m)?)?;
    Ok(())
}
