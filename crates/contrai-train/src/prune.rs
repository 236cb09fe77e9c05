//! Magnitude pruning of weight matrices addressed by their parameter paths
//! (`blocks.0.attn.query.weight`): keep-masks, the one-shot pruning the `diagnose` phase measures
//! sensitivity with, and the gradual pruning of `contract`.

use std::collections::BTreeMap;

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
}

/// Prunes the smallest-magnitude `fraction` of the entries of the weight matrices of `module`
/// (a module path such as `blocks.0.ffn`; biases and norms are never pruned), as one pool: the
/// one-shot pruning of [`update_masks`] and [`apply_masks`] from no mask.
pub fn prune_module<M: Module>(model: M, module: &str, fraction: f64) -> M {
    let mut masks = Masks::default();
    update_masks(&model, &mut masks, &|path| {
        (module_of(path) == module).then_some(fraction)
    });
    apply_masks(model, &masks)
}

/// The modules whose weight matrices pruning addresses: each block's attention and feed-forward.
pub fn prunable_modules(layers: usize) -> Vec<String> {
    (0..layers)
        .flat_map(|i| [format!("blocks.{i}.attn"), format!("blocks.{i}.ffn")])
        .collect()
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
    model.map(&mut Apply {
        path: Path::default(),
        masks,
    })
}

/// Updates `masks` so that each module gets (at least) the sparsity `target` gives its weight
/// matrices' paths (`None`: not pruned; a module's first matrix decides): the smallest magnitudes
/// among its matrices are masked, and masked entries stay masked. Returns each updated module's
/// sparsity.
pub fn update_masks<M: Module>(
    model: &M,
    masks: &mut Masks,
    target: &dyn Fn(&str) -> Option<f64>,
) -> Vec<(String, f64)> {
    let all = weights(model, &|p| target(p).is_some());
    let mut modules: Vec<(String, f64)> = Vec::new();
    for (path, _, _) in &all {
        let m = module_of(path);
        if !modules.iter().any(|(x, _)| *x == m) {
            modules.push((m, target(path).unwrap_or(0.0)));
        }
    }
    let mut out = Vec::new();
    for (module, sparsity) in modules {
        let members: Vec<&(String, [usize; 2], Vec<f32>)> =
            all.iter().filter(|(p, _, _)| module_of(p) == module).collect();
        let n: usize = members.iter().map(|(_, _, v)| v.len()).sum();
        let k = ((n as f64) * sparsity.clamp(0.0, 1.0)).floor() as usize;
        // Score = |w|, with masked entries first so that a pruned weight is never revived.
        let flags: Vec<Vec<bool>> = members
            .iter()
            .map(|(p, _, v)| masks.keep_flags(p, v.len()))
            .collect();
        let mut scores: Vec<f32> = Vec::with_capacity(n);
        for ((_, _, v), keep) in members.iter().zip(&flags) {
            scores.extend(v.iter().zip(keep).map(|(w, k)| if *k { w.abs() } else { -1.0 }));
        }
        let threshold = if k == 0 {
            f32::NEG_INFINITY
        } else {
            let mut s = scores.clone();
            *s.select_nth_unstable_by(k - 1, f32::total_cmp).1
        };
        let mut offset = 0;
        for ((path, _, v), keep) in members.iter().zip(&flags) {
            let next: Vec<bool> = (0..v.len())
                .map(|i| keep[i] && scores[offset + i] > threshold)
                .collect();
            offset += v.len();
            masks.set(path, &next);
        }
        out.push((module.clone(), masks.sparsity(&module).unwrap_or(0.0)));
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
