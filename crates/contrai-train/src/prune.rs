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
