//! Magnitude pruning of weight matrices addressed by their parameter paths
//! (`blocks.0.attn.query.weight`): keep-masks set to the conductor's targets, by single weights
//! (per module or one global threshold), by whole attention heads or by whole feed-forward
//! units, and applied after every
//! optimizer step. Which matrices, how far and when is the conductor's (`contrai_lifecycle::prune_policy`).

use std::collections::BTreeMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use contrai_lifecycle::Target;
use contrai_lifecycle::prune_policy::{is_attention, module_of};
use contrai_lifecycle::select;
use contrai_recipe::PruneScope;

mod whole;

pub use whole::Structure;
use whole::update_group_masks;

/// Tracks the dotted path of the parameter being visited.
#[derive(Default)]
struct Path(Vec<String>);

impl Path {
    /// Enum variants (`Classifier::Transformer`) are not part of a path, as in the exported files.
    fn enter(&mut self, name: &str, container: &str) {
        if !container.starts_with("Enum:") {
            self.0.push(name.to_string());
        }
    }
    fn exit(&mut self, container: &str) {
        if !container.starts_with("Enum:") {
            self.0.pop();
        }
    }
}

/// A visitor of parameters by their dotted path (`encoder.layers.0.ffn.w1.weight`).
pub(crate) trait PathVisitor {
    fn visit<const D: usize>(&mut self, path: String, param: &Param<Tensor<D>>);
}

/// A mapper of parameters by their dotted path.
pub(crate) trait PathMapper {
    fn map<const D: usize>(&mut self, path: String, param: Param<Tensor<D>>) -> Param<Tensor<D>>;
}

/// Burn's visitor and mapper with the path tracked, handing each parameter to `inner` with it.
pub(crate) struct Pathed<T> {
    path: Path,
    pub(crate) inner: T,
}

impl<T> Pathed<T> {
    pub(crate) fn new(inner: T) -> Self {
        Pathed {
            path: Path::default(),
            inner,
        }
    }
}

impl<T: PathVisitor> ModuleVisitor for Pathed<T> {
    fn enter_module(&mut self, name: &str, container: &str) {
        self.path.enter(name, container);
    }
    fn exit_module(&mut self, _: &str, container: &str) {
        self.path.exit(container);
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.inner.visit(self.path.0.join("."), param);
    }
}

impl<T: PathMapper> ModuleMapper for Pathed<T> {
    fn enter_module(&mut self, name: &str, container: &str) {
        self.path.enter(name, container);
    }
    fn exit_module(&mut self, _: &str, container: &str) {
        self.path.exit(container);
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        self.inner.map(self.path.0.join("."), param)
    }
}

/// Keep-masks of the pruned weight matrices, by parameter path; packed 64 entries a word.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Masks {
    /// Path → (entries, packed keep bits).
    pub keep: BTreeMap<String, (usize, Vec<u64>)>,
}

impl Masks {
    /// One keep flag an entry of `path`'s `len` entries (all kept when the path has no mask).
    pub fn keep_flags(&self, path: &str, len: usize) -> Vec<bool> {
        match self.keep.get(path) {
            Some((_, w)) => (0..len).map(|i| w[i / 64] >> (i % 64) & 1 == 1).collect(),
            None => vec![true; len],
        }
    }

    /// Sets the mask of `path` from one bool an entry.
    pub fn set(&mut self, path: &str, keep: &[bool]) {
        let mut words = vec![0u64; keep.len().div_ceil(64)];
        for (i, _) in keep.iter().enumerate().filter(|(_, k)| **k) {
            words[i / 64] |= 1 << (i % 64);
        }
        self.keep.insert(path.to_string(), (keep.len(), words));
    }

    /// The share of zeros (pruned entries) over the masks whose paths `pick` accepts.
    fn share(&self, pick: impl Fn(&str) -> bool) -> Option<f64> {
        let (mut n, mut kept) = (0usize, 0usize);
        for (len, words) in self.keep.iter().filter(|(p, _)| pick(p)).map(|(_, v)| v) {
            n += len;
            kept += words.iter().map(|w| w.count_ones() as usize).sum::<usize>();
        }
        (n > 0).then(|| 1.0 - kept as f64 / n as f64)
    }

    /// The share of zeros over the masks of paths under `module`.
    pub fn sparsity(&self, module: &str) -> Option<f64> {
        self.share(|p| module_of(p) == module)
    }

    /// The share of zeros over all masks (0 when there is none).
    pub fn overall(&self) -> f64 {
        self.share(|_| true).unwrap_or(0.0)
    }

    /// The sparsity of each masked module.
    pub fn by_module(&self) -> BTreeMap<String, f64> {
        let modules: std::collections::BTreeSet<String> = self.keep.keys().map(|p| module_of(p)).collect();
        modules
            .into_iter()
            .map(|m| {
                let s = self.sparsity(&m).unwrap_or(0.0);
                (m, s)
            })
            .collect()
    }

    /// Whether there is no mask.
    pub fn is_empty(&self) -> bool {
        self.keep.is_empty()
    }
}

/// The values of the weight matrices whose paths `select` accepts (or of their gradients in
/// `grads`), by path, with their shapes.
struct Weights<'a> {
    select: &'a dyn Fn(&str) -> bool,
    grads: Option<&'a GradientsParams>,
    out: Vec<(String, [usize; 2], Vec<f32>)>,
}

impl PathVisitor for Weights<'_> {
    fn visit<const D: usize>(&mut self, path: String, param: &Param<Tensor<D>>) {
        if D == 2 && (self.select)(&path) {
            let t = match self.grads {
                None => param.val(),
                Some(g) => match g.get::<D>(param.id) {
                    Some(g) => g,
                    None => return,
                },
            };
            let t = match t.dtype() {
                burn::tensor::DType::QFloat(_) => t.dequantize(),
                _ => t,
            };
            let dims = t.dims();
            let v: Vec<f32> = t.into_data().try_to_vec().unwrap_or_default();
            self.out.push((path, [dims[0], dims[1]], v));
        }
    }
}

/// The paths of the weight matrices (2-D parameters), in the model's order.
struct Paths(Vec<String>);

impl PathVisitor for Paths {
    fn visit<const D: usize>(&mut self, path: String, _: &Param<Tensor<D>>) {
        if D == 2 {
            self.0.push(path);
        }
    }
}

/// The paths of `model`'s weight matrices, in its order (what the conductor prunes by).
pub fn matrix_paths<M: Module>(model: &M) -> Vec<String> {
    let mut v = Pathed::new(Paths(Vec::new()));
    model.visit(&mut v);
    v.inner.0
}

/// The weight matrices `select` accepts: (path, shape, values).
pub fn weights<M: Module>(model: &M, select: &dyn Fn(&str) -> bool) -> Vec<(String, [usize; 2], Vec<f32>)> {
    read_matrices(model, select, None)
}

/// The gradients in `grads` of the weight matrices `select` accepts: (path, shape, values); a
/// matrix without a gradient (frozen) is left out.
pub fn gradients<M: Module>(
    model: &M,
    grads: &GradientsParams,
    select: &dyn Fn(&str) -> bool,
) -> Vec<(String, [usize; 2], Vec<f32>)> {
    read_matrices(model, select, Some(grads))
}

/// [`weights`], or [`gradients`] when `grads` is given.
fn read_matrices<M: Module>(
    model: &M,
    select: &dyn Fn(&str) -> bool,
    grads: Option<&GradientsParams>,
) -> Vec<(String, [usize; 2], Vec<f32>)> {
    let mut v = Pathed::new(Weights {
        select,
        grads,
        out: Vec::new(),
    });
    model.visit(&mut v);
    v.inner.out
}

/// Tracks gradients for the weight matrices `select` accepts and for nothing else.
struct Tracked<'a> {
    select: &'a dyn Fn(&str) -> bool,
}

impl PathMapper for Tracked<'_> {
    fn map<const D: usize>(&mut self, path: String, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        param.set_require_grad(D == 2 && (self.select)(&path))
    }
}

/// `model` with gradients tracked only for the weight matrices `select` accepts (a backward pass
/// then skips every other weight's gradient, the embeddings' among them).
pub fn tracking_only<M: Module>(model: M, select: &dyn Fn(&str) -> bool) -> M {
    model.map(&mut Pathed::new(Tracked { select }))
}

/// Multiplies every masked weight matrix by its mask, leaving a trainable leaf.
struct Apply<'a> {
    masks: &'a Masks,
}

impl PathMapper for Apply<'_> {
    fn map<const D: usize>(&mut self, path: String, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let Some(&(len, _)) = self.masks.keep.get(&path) else {
            return param;
        };
        let keep: Vec<f32> = self
            .masks
            .keep_flags(&path, len)
            .into_iter()
            .map(|k| f32::from(u8::from(k)))
            .collect();
        param.map(|w| {
            let device = w.device();
            let grad = w.is_require_grad();
            let mask = Tensor::<1>::from_floats(keep.as_slice(), &device).reshape(w.dims());
            let out = (w * mask).detach();
            if grad { out.require_grad() } else { out }
        })
    }
}

/// Zeroes the pruned entries of `model` (after every optimizer step, so they stay zero).
pub fn apply_masks<M: Module>(model: M, masks: &Masks) -> M {
    if masks.is_empty() {
        return model;
    }
    model.map(&mut Pathed::new(Apply { masks }))
}

type Matrix = (String, [usize; 2], Vec<f32>);

/// One module's matrices and the magnitude scores of their entries (masked entries score −1,
/// so that a pruned weight is never revived).
struct Pool<'a> {
    module: String,
    members: Vec<&'a Matrix>,
    scores: Vec<f32>,
    target: Target,
}

/// Updates `masks` so that the modules `target` selects (by their weight matrices' paths; `None`:
/// not pruned; a module's first matrix decides) lose their smallest-magnitude weights, per module
/// or globally. Masked entries stay masked. Returns each updated module's sparsity.
pub fn update_masks<M: Module>(
    model: &M,
    masks: &mut Masks,
    target: &dyn Fn(&str) -> Option<Target>,
    scope: PruneScope,
) -> Vec<(String, f64)> {
    let all = weights(model, &|p| target(p).is_some());
    let mut pools: Vec<Pool> = Vec::new();
    for m in &all {
        let module = module_of(&m.0);
        let keep = masks.keep_flags(&m.0, m.2.len());
        let scores = m.2.iter().zip(keep).map(|(w, k)| if k { w.abs() } else { -1.0 });
        match pools.iter_mut().find(|p| p.module == module) {
            Some(p) => {
                p.members.push(m);
                p.scores.extend(scores);
            }
            None => pools.push(Pool {
                target: target(&m.0).unwrap_or(Target::uncapped(0.0)),
                module,
                members: vec![m],
                scores: scores.collect(),
            }),
        }
    }
    let scored: Vec<(&[f32], Target)> = pools.iter().map(|p| (&p.scores[..], p.target)).collect();
    let mut out = Vec::new();
    for (pool, keep) in pools.iter().zip(select::magnitude_masks(&scored, scope)) {
        let mut offset = 0;
        for (path, _, v) in &pool.members {
            masks.set(path, &keep[offset..offset + v.len()]);
            offset += v.len();
        }
        out.push((pool.module.clone(), masks.sparsity(&pool.module).unwrap_or(0.0)));
    }
    out
}

/// Fresh masks from one [`update_all`] per module (`PruneScope::Module`): the tests of whole-group
/// pruning start from these.
#[cfg(test)]
pub(crate) fn module_masks<M: Module>(
    model: &M,
    target: &dyn Fn(&str) -> Option<Target>,
    structure: Structure,
) -> Masks {
    let mut masks = Masks::default();
    update_all(model, &mut masks, target, PruneScope::Module, structure);
    masks
}

/// Updates `masks` for every module `target` selects: attention by whole heads and feed-forward
/// layers by whole units when `structure` says so, everything else by magnitude in `scope`.
pub fn update_all<M: Module>(
    model: &M,
    masks: &mut Masks,
    target: &dyn Fn(&str) -> Option<Target>,
    scope: PruneScope,
    structure: Structure,
) {
    let wholes = structure.wholes();
    let paths: std::collections::BTreeSet<String> = matrix_paths(model).into_iter().collect();
    let has = |p: &str| paths.contains(p);
    for &whole in &wholes {
        update_group_masks(model, masks, whole, target, &has);
    }
    // What the groups decide (a targeted attention's projections, BERT's output one included, a
    // targeted feed-forward layer's two matrices) is not pruned a second time by magnitude; with
    // heads, attention is never pruned by single weights.
    let grouped = |p: &str| {
        wholes
            .iter()
            .any(|w| w.member(p, &has).is_some_and(|(key, _)| target(&key).is_some()))
    };
    let single = |p: &str| {
        let by_heads = structure.heads.is_some() && is_attention(&module_of(p));
        !by_heads && !grouped(p)
    };
    let rest = |p: &str| target(p).filter(|_| single(p));
    update_masks(model, masks, &rest, scope);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_and_masks() {
        let mut m = Masks::default();
        let keep: Vec<bool> = (0..130).map(|i| i % 4 != 0).collect();
        m.set("blocks.0.ffn.up.weight", &keep);
        assert_eq!(m.keep_flags("blocks.0.ffn.up.weight", 130), keep);
        assert!(
            m.keep_flags("blocks.0.ffn.down.weight", 3).iter().all(|k| *k),
            "no mask: kept"
        );
        assert!((m.sparsity("blocks.0.ffn").unwrap() - 33.0 / 130.0).abs() < 1e-12);
        assert!((m.overall() - 33.0 / 130.0).abs() < 1e-12);
        assert_eq!(m.by_module().len(), 1);
    }
}

#[cfg(test)]
mod scope_tests {
    use super::*;
    use crate::model::Classifier;
    use burn::tensor::Device;

    pub(super) fn tiny() -> Classifier {
        let spec = contrai_recipe::recipe::Model {
            vocab: 16,
            seq_len: 4,
            d_model: 8,
            layers: 2,
            heads: 2,
            ffn: 16,
            ..Default::default()
        };
        Classifier::new(&spec, 2, 0, 3, &Device::flex()).unwrap()
    }

    #[test]
    fn matrix_paths_name_every_weight_matrix_and_no_bias() {
        let paths = matrix_paths(&tiny());
        for p in [
            "blocks.0.attn.query.weight",
            "blocks.1.ffn.down.weight",
            "head.weight",
        ] {
            assert!(paths.iter().any(|x| x == p), "{p} missing from {paths:?}");
        }
        assert!(paths.iter().all(|p| !p.ends_with("bias")), "{paths:?}");
    }

    pub(super) fn is_ffn(p: &str) -> bool {
        module_of(p).ends_with("ffn")
    }

    #[test]
    fn global_scope_prunes_the_smallest_overall_and_holds_a_cap() {
        let mut model = tiny();
        let Classifier::Transformer(t) = &mut model else {
            unreachable!()
        };
        // Block 1's feed-forward weights are 10x larger: a global threshold reaches block 0 first.
        let ffn = &mut t.blocks[1].ffn;
        ffn.up.weight = ffn.up.weight.clone().map(|w| w * 10.0);
        ffn.down.weight = ffn.down.weight.clone().map(|w| w * 10.0);
        let target = |p: &str| {
            is_ffn(p).then_some(Target {
                sparsity: 0.5,
                cap: if p.starts_with("blocks.0") { 0.6 } else { 1.0 },
            })
        };
        let mut masks = Masks::default();
        let got = update_masks(&model, &mut masks, &target, PruneScope::Global);
        let n = 2 * 8 * 16;
        let s0 = masks.sparsity("blocks.0.ffn").unwrap();
        let s1 = masks.sparsity("blocks.1.ffn").unwrap();
        assert_eq!(
            s0,
            (0.6 * n as f64).floor() / n as f64,
            "held at its cap: {got:?}"
        );
        assert!(
            (s0 + s1 - 1.0).abs() < 1e-9,
            "the total is what the targets ask: {s0} + {s1}"
        );
        // Within block 1, every pruned weight is smaller than every kept one.
        let pruned = apply_masks(model.clone(), &masks);
        let (mut max_pruned, mut min_kept) = (0f32, f32::INFINITY);
        for ((_, _, before), (_, _, after)) in weights(&model, &|p| p.starts_with("blocks.1.ffn"))
            .iter()
            .zip(weights(&pruned, &|p| p.starts_with("blocks.1.ffn")))
        {
            for (b, a) in before.iter().zip(after) {
                if a == 0.0 {
                    max_pruned = max_pruned.max(b.abs());
                } else {
                    min_kept = min_kept.min(b.abs());
                }
            }
        }
        assert!(max_pruned <= min_kept, "{max_pruned} vs {min_kept}");
        // Module scope gives each module its own half.
        let mut per = Masks::default();
        update_masks(&model, &mut per, &target, PruneScope::Module);
        assert_eq!(per.sparsity("blocks.1.ffn"), Some(0.5));
    }
}

/// The Burn engine's masks on fixed weights and targets, written for the PyTorch engine's test
/// (`crates/contrai-py/tests/test_masks.py`), which must reach the same masks bit for bit from the
/// same file: both engines select through `contrai_lifecycle::select`, and this pair of tests
/// checks everything around it (scores, layouts, grouping by names, pools) agrees.
#[cfg(test)]
mod engines_agree {
    use super::*;
    use burn::tensor::Device;
    use serde_json::{Value, json};

    const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../contrai-py/tests/data/masks.json");

    /// Sets every encoder matrix to exact, distinct-ish values (multiples of 1/2048, so sums of
    /// squares are exact in any order).
    struct Fixed {
        m: usize,
    }

    impl PathMapper for Fixed {
        fn map<const D: usize>(&mut self, path: String, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            if D != 2 || !path.contains(".encoder.") {
                return param;
            }
            self.m += 1;
            let m = self.m;
            param.map(|w| {
                let n: usize = w.dims().iter().product();
                let v: Vec<f32> = (0..n)
                    .map(|i| {
                        let k = ((i * 7919 + m * 104_729) % 2003 + 1) as f32 / 2048.0;
                        if (i * 31 + m).is_multiple_of(3) { -k } else { k }
                    })
                    .collect();
                Tensor::<1>::from_floats(v.as_slice(), &w.device()).reshape(w.dims())
            })
        }
    }

    /// A case: its name, scope, whole structures, and a target per matrix path.
    type Case = (&'static str, PruneScope, Structure, fn(&str) -> Target);

    /// The cases the engines are compared on.
    fn cases() -> Vec<Case> {
        fn module(p: &str) -> Target {
            match is_attention(&module_of(p)) {
                true => Target {
                    sparsity: 0.5,
                    cap: 0.2,
                },
                false => Target::uncapped(0.3),
            }
        }
        fn global(p: &str) -> Target {
            let cap = match module_of(p) {
                m if is_attention(&m) => 0.2,
                m if m == "bert.encoder.layer.1.intermediate" => 0.3,
                _ => 1.0,
            };
            Target { sparsity: 0.4, cap }
        }
        fn whole(p: &str) -> Target {
            let m = module_of(p);
            let s = if is_attention(&m) {
                0.5
            } else if m.ends_with("intermediate") {
                0.25
            } else {
                0.3
            };
            Target::uncapped(s)
        }
        vec![
            ("module", PruneScope::Module, Structure::default(), module),
            ("global", PruneScope::Global, Structure::default(), global),
            (
                "heads_and_units",
                PruneScope::Module,
                Structure::new(Some(4), true),
                whole,
            ),
        ]
    }

    fn bits(keep: &[bool]) -> String {
        keep.iter().map(|k| if *k { '1' } else { '0' }).collect()
    }

    #[test]
    fn the_burn_engines_masks_are_the_fixture_the_pytorch_engine_is_held_to() {
        let model = crate::pretrained::fixture(&Device::flex()).map(&mut Pathed::new(Fixed { m: 0 }));
        let encoder = weights(&model, &|p| p.contains(".encoder."));
        let shapes: BTreeMap<&str, [usize; 2]> = encoder.iter().map(|(p, s, _)| (p.as_str(), *s)).collect();
        let mut out = json!({
            "about": "written by contrai-train's prune::engines_agree (CONTRAI_BLESS=1); Burn layout [in, out], Burn names",
            "weights": encoder.iter().map(|(p, s, v)| (p.clone(), json!({"shape": s, "values": v}))).collect::<serde_json::Map<_, _>>(),
            "cases": [],
        });
        for (name, scope, structure, target) in cases() {
            let targets: BTreeMap<&str, Target> = shapes.keys().map(|p| (*p, target(p))).collect();
            let mut masks = Masks::default();
            update_all(&model, &mut masks, &|p| targets.get(p).copied(), scope, structure);
            let keep: serde_json::Map<String, Value> = shapes
                .iter()
                .map(|(p, [r, c])| (p.to_string(), json!(bits(&masks.keep_flags(p, r * c)))))
                .collect();
            assert!(masks.overall() > 0.1, "{name}: something is pruned");
            out["cases"].as_array_mut().unwrap().push(json!({
                "name": name,
                "scope": scope,
                "heads": structure.heads,
                "units": structure.units,
                "targets": targets,
                "keep": keep,
            }));
        }
        let text = serde_json::to_string(&out).unwrap() + "\n";
        if std::env::var_os("CONTRAI_BLESS").is_some() {
            std::fs::create_dir_all(std::path::Path::new(FILE).parent().unwrap()).unwrap();
            std::fs::write(FILE, &text).unwrap();
        }
        let have = std::fs::read_to_string(FILE).unwrap_or_default();
        assert!(
            have == text,
            "{FILE} is not what the Burn engine computes now: if the change is meant, rewrite it with CONTRAI_BLESS=1 and run the Python test"
        );
    }
}
