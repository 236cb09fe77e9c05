//! Binds the data stage: the audit, the split and the sharded audit's passes (Ray Data).

use std::path::{Path, PathBuf};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::convert::json;

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
#[pyo3(signature = (path: "str | PathLike[str]", text: "str" = "text", label: "str" = "label", columns: "list[str] | None" = None) -> "str")]
pub(crate) fn audit(
    path: PathBuf,
    text: &str,
    label: &str,
    columns: Option<Vec<String>>,
) -> PyResult<String> {
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
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (path: "str | PathLike[str]", out: "str | PathLike[str]", ratios: "tuple[float, float, float] | None" = None, seed: "int | None" = None, text: "str | None" = None, label: "str | None" = None, columns: "list[str] | None" = None, parent: "str | PathLike[str] | None" = None, allow_shrink: "bool" = false, force: "bool" = false, keep_previous: "bool" = false) -> "str")]
pub(crate) fn split(
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
#[allow(clippy::type_complexity)]
#[pyo3(signature = (texts: "list[str | None]", num_perm: "int" = 256, threshold: "float" = 0.8, edit_share: "float" = 0.05, fingerprints: "bool" = false) -> "tuple[bytes, bytes, bytes, list[int], list[tuple[list[int], list[int]]]]")]
pub(crate) fn signatures<'py>(
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
#[pyo3(signature = (ids: "list[str]", contents: "list[bytes]", words: "list[int]", votes: "int", edit_share: "float" = 0.05) -> "list[tuple[str, str, bool, int]]")]
pub(crate) fn key_pairs(
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
#[pyo3(signature = (pairs: "list[tuple[tuple[list[int], list[int]], tuple[list[int], list[int]]]]", threshold: "float" = 0.8, edit_share: "float" = 0.05) -> "list[bool]")]
pub(crate) fn near_pairs(
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
