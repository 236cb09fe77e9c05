//! The pieces of an optimizer step: AdamW, gradient accumulation, the global gradient norm and
//! clipping.

use std::collections::BTreeSet;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{AdamWConfig, GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::Tensor;
use contrai_recipe::Recipe;

use crate::dropout::Dropout;
use crate::model::{Batch, Classifier, cross_entropy};
use crate::prune::{PathVisitor, Pathed};
use crate::recompute::Blocks;

struct SqNorm<'a> {
    grads: &'a GradientsParams,
    parts: Vec<Tensor<1>>,
}

impl ModuleVisitor for SqNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            self.parts.push(g.square().sum());
        }
    }
}

struct Scale<'a> {
    grads: &'a mut GradientsParams,
    factor: f64,
}

impl ModuleVisitor for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(param.id) {
            self.grads.register(param.id, g.mul_scalar(self.factor));
        }
    }
}

/// Trainable parameters, by path, whose gradient is absent or zero (`among`: only those named).
struct Ungraded<'a> {
    grads: &'a GradientsParams,
    among: Option<&'a BTreeSet<String>>,
    out: BTreeSet<String>,
}

impl PathVisitor for Ungraded<'_> {
    fn visit<const D: usize>(&mut self, path: String, param: &Param<Tensor<D>>) {
        if !param.is_require_grad() || self.among.is_some_and(|a| !a.contains(&path)) {
            return;
        }
        let graded = self
            .grads
            .get::<D>(param.id)
            .is_some_and(|g| g.abs().max().into_scalar::<f32>() > 0.0);
        if !graded {
            self.out.insert(path);
        }
    }
}

/// The trainable parameters of `model` that `grads` gives no non-zero gradient, by path; with
/// `among`, only those of its names (validate's check narrows the set step by step: a LoRA
/// adapter's `a` gets its first gradient only once `b` has moved from zero).
pub fn ungraded<M: Module>(
    model: &M,
    grads: &GradientsParams,
    among: Option<&BTreeSet<String>>,
) -> BTreeSet<String> {
    let mut v = Pathed::new(Ungraded {
        grads,
        among,
        out: BTreeSet::new(),
    });
    model.visit(&mut v);
    v.inner.out
}

/// The global L2 norm of the gradients of `model`'s parameters.
pub fn grad_norm<M: Module>(model: &M, grads: &GradientsParams) -> f32 {
    let mut v = SqNorm {
        grads,
        parts: Vec::new(),
    };
    model.visit(&mut v);
    if v.parts.is_empty() {
        return 0.0;
    }
    Tensor::cat(v.parts, 0).sum().into_scalar::<f32>().sqrt()
}

/// Global-norm clipping: scales the gradients down to norm `clip` when their norm `norm` is
/// above it (`clip` 0: no clipping).
pub fn clip_grads<M: Module>(model: &M, grads: &mut GradientsParams, norm: f32, clip: f64) {
    if clip > 0.0 && f64::from(norm) > clip {
        scale_grads(model, grads, clip / (f64::from(norm) + 1e-6));
    }
}

/// Scales every gradient by `factor`.
pub fn scale_grads<M: Module>(model: &M, grads: &mut GradientsParams, factor: f64) {
    model.visit(&mut Scale { grads, factor });
}

/// One optimizer step's gradients: `accumulate` micro-batches, each loss scaled so the sum is
/// the mean over the effective batch. Returns the gradients and the mean loss. `poison` multiplies
/// the loss by NaN (the test hook of the non-finite guard); `recompute` keeps only each block's
/// input for the backward pass ([`crate::recompute`]; models without blocks ignore it).
pub fn step_grads(
    model: &Classifier,
    batches: &[Batch],
    drops: &[Option<Dropout>],
    poison: bool,
    recompute: bool,
) -> (GradientsParams, f32) {
    let total: usize = batches.iter().map(Batch::len).sum();
    let mut acc = GradientsAccumulator::<Classifier>::new();
    let mut single = None;
    let mut loss_sum = 0f64;
    let blocks = Blocks::of(model).filter(|_| recompute);
    for (b, d) in batches.iter().zip(drops) {
        let w = if poison {
            f64::NAN
        } else {
            b.len() as f64 / total as f64
        };
        if let (Some(blocks), Batch::Text(text)) = (blocks, b) {
            loss_sum += f64::from(crate::recompute::accumulate(
                model,
                blocks,
                text,
                d.as_ref(),
                w,
                &mut acc,
            ));
            continue;
        }
        let logits = model.forward(b, d.as_ref());
        let scaled = cross_entropy(logits, b.labels()).mul_scalar(w);
        let grads = GradientsParams::from_grads(scaled.backward(), model);
        loss_sum += f64::from(scaled.into_scalar::<f32>());
        if batches.len() == 1 {
            single = Some(grads);
        } else {
            acc.accumulate(model, grads);
        }
    }
    (single.unwrap_or_else(|| acc.grads()), loss_sum as f32)
}

/// The AdamW optimizer of a recipe.
pub fn optimizer(recipe: &Recipe) -> ModuleOptimizer {
    AdamWConfig::new()
        .with_weight_decay(recipe.main.weight_decay as f32)
        .with_epsilon(1e-8)
        .init()
}
