//! Magnitude pruning of weight matrices addressed by their parameter paths
//! (`blocks.0.attn.query.weight`): the one-shot pruning the `diagnose` phase measures sensitivity
//! with.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::Tensor;

/// Tracks the dotted path of the parameter being visited.
#[derive(Default)]
struct Path(Vec<String>);

impl Path {
    fn enter(&mut self, name: &str) {
        self.0.push(name.to_string());
    }
    fn exit(&mut self) {
        self.0.pop();
    }
    fn under(&self, prefix: &str) -> bool {
        let p = self.0.join(".");
        p == prefix || p.starts_with(&format!("{prefix}."))
    }
}

/// Collects the magnitudes of the weight matrices under a prefix.
struct Magnitudes<'a> {
    path: Path,
    prefix: &'a str,
    out: Vec<f32>,
}

impl ModuleVisitor for Magnitudes<'_> {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.enter(name);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if D == 2 && self.path.under(self.prefix) {
            let v: Vec<f32> = param.val().into_data().try_to_vec().unwrap_or_default();
            self.out.extend(v.into_iter().map(f32::abs));
        }
    }
}

/// Zeroes the entries at or below a magnitude in the weight matrices under a prefix.
struct Zero<'a> {
    path: Path,
    prefix: &'a str,
    threshold: f32,
}

impl ModuleMapper for Zero<'_> {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.enter(name);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if D != 2 || !self.path.under(self.prefix) {
            return param;
        }
        let t = self.threshold;
        param.map(|w| {
            let small = w.clone().abs().lower_equal_elem(t);
            w.mask_fill(small, 0.0)
        })
    }
}

/// Prunes the smallest-magnitude `fraction` of the entries of the weight matrices under `prefix`
/// (a module path such as `blocks.0.ffn`; biases and norms are never pruned), as one pool.
/// Returns the pruned model and the share of those entries that are now zero.
pub fn prune_module<M: Module>(model: M, prefix: &str, fraction: f64) -> (M, f64) {
    let mut v = Magnitudes {
        path: Path::default(),
        prefix,
        out: Vec::new(),
    };
    model.visit(&mut v);
    let mut mags = v.out;
    if mags.is_empty() || fraction <= 0.0 {
        return (model, 0.0);
    }
    let k = ((mags.len() as f64 * fraction).floor() as usize).clamp(1, mags.len()) - 1;
    let (_, &mut threshold, _) = mags.select_nth_unstable_by(k, f32::total_cmp);
    let zero = mags.iter().filter(|&&m| m <= threshold).count() as f64 / mags.len() as f64;
    let model = model.map(&mut Zero {
        path: Path::default(),
        prefix,
        threshold,
    });
    (model, zero)
}

/// The modules whose weight matrices pruning addresses: each block's attention and feed-forward.
pub fn prunable_modules(layers: usize) -> Vec<String> {
    (0..layers)
        .flat_map(|i| [format!("blocks.{i}.attn"), format!("blocks.{i}.ffn")])
        .collect()
}

/// Zero share of the weight matrices under `prefix`.
pub fn sparsity<M: Module>(model: &M, prefix: &str) -> f64 {
    let mut v = Magnitudes {
        path: Path::default(),
        prefix,
        out: Vec::new(),
    };
    model.visit(&mut v);
    if v.out.is_empty() {
        return 0.0;
    }
    v.out.iter().filter(|&&m| m == 0.0).count() as f64 / v.out.len() as f64
}

/// The sparsity of a gradual schedule at `progress` in [0, 1]: cubic (Zhu & Gupta,
/// `s_f + (s_i − s_f)(1 − p)³`: fast early, gentle as the model settles) or linear.
pub fn scheduled_sparsity(init: f64, fin: f64, progress: f64, cubic: bool) -> f64 {
    let p = progress.clamp(0.0, 1.0);
    if cubic {
        fin + (init - fin) * (1.0 - p).powi(3)
    } else {
        init + (fin - init) * p
    }
}

/// The module a weight belongs to: its path without the layer and parameter names
/// (`blocks.0.attn.query.weight` → `blocks.0.attn`).
pub fn module_of(path: &str) -> String {
    let parts: Vec<&str> = path.split('.').collect();
    parts[..parts.len().saturating_sub(2).max(1)].join(".")
}

/// Keep-masks of the pruned weight matrices, by parameter path; packed 64 entries a word.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Masks {
    /// Path → (entries, packed keep bits).
    pub keep: std::collections::BTreeMap<String, (usize, Vec<u64>)>,
}

impl Masks {
    /// Whether entry `i` of `path` is kept (true when the path has no mask).
    pub fn kept(&self, path: &str, i: usize) -> bool {
        self.keep
            .get(path)
            .is_none_or(|(_, w)| w[i / 64] >> (i % 64) & 1 == 1)
    }

    /// Sets the mask of `path` from one bool an entry.
    pub fn set(&mut self, path: &str, keep: &[bool]) {
        let mut words = vec![0u64; keep.len().div_ceil(64)];
        for (i, _) in keep.iter().enumerate().filter(|(_, k)| **k) {
            words[i / 64] |= 1 << (i % 64);
        }
        self.keep.insert(path.to_string(), (keep.len(), words));
    }

    /// The share of zeros (pruned entries) over the masks of paths under `module`.
    pub fn sparsity(&self, module: &str) -> Option<f64> {
        let (mut n, mut kept) = (0usize, 0usize);
        for (path, (len, words)) in &self.keep {
            if module_of(path) == module {
                n += len;
                kept += words.iter().map(|w| w.count_ones() as usize).sum::<usize>();
            }
        }
        (n > 0).then(|| 1.0 - kept as f64 / n as f64)
    }

    /// Whether there is no mask.
    pub fn is_empty(&self) -> bool {
        self.keep.is_empty()
    }
}

/// The values of the weight matrices whose paths `select` accepts, by path, with their shapes.
struct Weights<'a> {
    path: Path,
    select: &'a dyn Fn(&str) -> bool,
    out: Vec<(String, [usize; 2], Vec<f32>)>,
}

impl ModuleVisitor for Weights<'_> {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.enter(name);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let path = self.path.0.join(".");
        if D == 2 && (self.select)(&path) {
            let t = param.val();
            let dims = t.dims();
            let v: Vec<f32> = t.into_data().try_to_vec().unwrap_or_default();
            self.out.push((path, [dims[0], dims[1]], v));
        }
    }
}

/// The weight matrices `select` accepts: (path, shape, values).
pub fn weights<M: Module>(model: &M, select: &dyn Fn(&str) -> bool) -> Vec<(String, [usize; 2], Vec<f32>)> {
    let mut v = Weights {
        path: Path::default(),
        select,
        out: Vec::new(),
    };
    model.visit(&mut v);
    v.out
}

/// Multiplies every masked weight matrix by its mask, leaving a trainable leaf.
struct Apply<'a> {
    path: Path,
    masks: &'a Masks,
}

impl ModuleMapper for Apply<'_> {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.enter(name);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let path = self.path.0.join(".");
        let Some((len, _)) = self.masks.keep.get(&path) else {
            return param;
        };
        let keep: Vec<f32> = (0..*len)
            .map(|i| f32::from(u8::from(self.masks.kept(&path, i))))
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
    model.map(&mut Apply {
        path: Path::default(),
        masks,
    })
}

/// One module's pruning target at a step.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The module path.
    pub module: String,
    /// The sparsity it should have now.
    pub sparsity: f64,
}

/// Updates `masks` so that each target module has (at least) its sparsity: the smallest
/// magnitudes among its weight matrices (matched by `select`) are masked; masked entries stay
/// masked. Returns each module's sparsity afterwards.
pub fn update_masks<M: Module>(
    model: &M,
    masks: &mut Masks,
    targets: &[Target],
    select: &dyn Fn(&str) -> bool,
) -> Vec<(String, f64)> {
    let all = weights(model, select);
    let mut out = Vec::new();
    for t in targets {
        let members: Vec<&(String, [usize; 2], Vec<f32>)> =
            all.iter().filter(|(p, _, _)| module_of(p) == t.module).collect();
        let n: usize = members.iter().map(|(_, _, v)| v.len()).sum();
        if n == 0 {
            continue;
        }
        let k = ((n as f64) * t.sparsity.clamp(0.0, 1.0)).floor() as usize;
        // Score = |w|, with masked entries first so that a pruned weight is never revived.
        let mut scores: Vec<f32> = Vec::with_capacity(n);
        for (path, _, v) in &members {
            scores.extend(
                v.iter()
                    .enumerate()
                    .map(|(i, w)| if masks.kept(path, i) { w.abs() } else { -1.0 }),
            );
        }
        let threshold = if k == 0 {
            f32::NEG_INFINITY
        } else {
            let mut s = scores.clone();
            *s.select_nth_unstable_by(k - 1, f32::total_cmp).1
        };
        let mut offset = 0;
        for (path, _, v) in &members {
            let keep: Vec<bool> = (0..v.len())
                .map(|i| masks.kept(path, i) && scores[offset + i] > threshold)
                .collect();
            offset += v.len();
            masks.set(path, &keep);
        }
        out.push((t.module.clone(), masks.sparsity(&t.module).unwrap_or(0.0)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cubic_schedule_matches_zhu_and_gupta() {
        assert!((scheduled_sparsity(0.1, 0.5, 0.0, true) - 0.1).abs() < 1e-12);
        // s = 0.5 + (0.1 − 0.5)(1 − 0.5)³ = 0.5 − 0.4 / 8 = 0.45
        assert!((scheduled_sparsity(0.1, 0.5, 0.5, true) - 0.45).abs() < 1e-12);
        assert!((scheduled_sparsity(0.1, 0.5, 1.0, true) - 0.5).abs() < 1e-12);
        assert!((scheduled_sparsity(0.1, 0.5, 0.5, false) - 0.3).abs() < 1e-12);
    }

    #[test]
    fn modules_and_masks() {
        assert_eq!(module_of("blocks.0.attn.query.weight"), "blocks.0.attn");
        assert_eq!(module_of("head.weight"), "head");
        let mut m = Masks::default();
        let keep: Vec<bool> = (0..130).map(|i| i % 4 != 0).collect();
        m.set("blocks.0.ffn.up.weight", &keep);
        assert!(!m.kept("blocks.0.ffn.up.weight", 0));
        assert!(m.kept("blocks.0.ffn.up.weight", 129));
        assert!(m.kept("blocks.0.ffn.down.weight", 0), "no mask: kept");
        assert!((m.sparsity("blocks.0.ffn").unwrap() - 33.0 / 130.0).abs() < 1e-12);
    }
}
