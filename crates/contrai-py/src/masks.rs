//! Binds the mask selection: which weights pruning takes, and the keep masks both engines share.

use contrai_lifecycle::Target;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::recipe;

/// The module a weight belongs to, as the conductor names it (`blocks.0.attn.query.weight` →
/// `blocks.0.attn`).
#[pyfunction]
#[pyo3(signature = (path: "str") -> "str")]
pub(crate) fn module_of(path: &str) -> String {
    contrai_lifecycle::prune_policy::module_of(path)
}

/// The matrices among `weights` that the recipe's `contract.prune` rules select, in their order
/// (a LoRA job's merged model trains them through contraction).
#[pyfunction]
#[pyo3(signature = (text: "str", path: "str", weights: "list[str]") -> "list[str]")]
pub(crate) fn pruned_weights(text: &str, path: &str, weights: Vec<String>) -> PyResult<Vec<String>> {
    let r = recipe::parse(text, path)?;
    let prunable = contrai_lifecycle::prune_policy::Prunable::new(&r.contract.prune, &weights);
    Ok(prunable.paths().map(str::to_string).collect())
}

/// Whether a module is attention, as the conductor tells (capped one weight at a time; pruned by
/// whole heads when the recipe asks).
#[pyfunction]
#[pyo3(signature = (module: "str") -> "bool")]
pub(crate) fn is_attention(module: &str) -> bool {
    contrai_lifecycle::prune_policy::is_attention(module)
}

/// How each of the model's matrices `paths` takes part in whole heads (`heads`) or whole units
/// (`units`), by the rule both engines share (`contrai_lifecycle::prune_policy::member_of`): by member
/// path, the matrix whose target decides its groups, whether they are its input features (an
/// output or down projection), and the structure (`heads` or `units`). Matrices in none are left
/// out.
#[pyfunction]
#[pyo3(signature = (paths: "list[str]", heads: "bool", units: "bool") -> "dict[str, tuple[str, bool, str]]")]
pub(crate) fn whole_members(
    paths: Vec<String>,
    heads: bool,
    units: bool,
) -> std::collections::BTreeMap<String, (String, bool, &'static str)> {
    let all: std::collections::BTreeSet<&str> = paths.iter().map(String::as_str).collect();
    let has = |p: &str| all.contains(p);
    paths
        .iter()
        .filter_map(|p| {
            let m = contrai_lifecycle::prune_policy::member_of(p, heads, units, &has)?;
            Some((p.clone(), (m.key, m.by_inputs, m.whole.name())))
        })
        .collect()
}

/// Keep masks of magnitude pruning, by the rule both engines share
/// (`contrai_lifecycle::select`): `pools` holds each module's scores (little-endian f32 bytes,
/// masked entries −1) with its target's sparsity and cap; `scope` is `module` or `global`.
/// Returns one byte an entry (1: kept) a module.
#[pyfunction]
#[pyo3(signature = (pools: "list[tuple[bytes, float, float]]", scope: "str") -> "list[bytes]")]
pub(crate) fn magnitude_masks<'py>(
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
#[pyo3(signature = (norm: "list[float]", dead: "list[bool]", sparsity: "float", cap: "float") -> "list[bool]")]
pub(crate) fn weakest_groups(
    norm: Vec<f64>,
    dead: Vec<bool>,
    sparsity: f64,
    cap: f64,
) -> PyResult<Vec<bool>> {
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
