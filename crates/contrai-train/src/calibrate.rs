//! A short measured run of a recipe's model: the time of a training step and of its parts, for
//! `contrai plan --calibrate` (random tokens) and for profiling (random tokens or a run's real
//! batches: real data makes denormals that random tokens never do, BENCHMARKS.md "Denormals").

use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Device;
use burn::tensor::Tensor;
use contrai_kernels::denormals;
use contrai_recipe::Recipe;

use crate::batch::{Batcher, Cursor, Encoded};
use crate::dropout::Dropout;
use crate::error::{Result, TrainError};
use crate::model::{Batch, Classifier, TextBatch, cross_entropy};
use crate::step::{clip_grads, grad_norm, optimizer, step_grads};

/// Steps run before timing starts (allocation and caches settle).
const WARMUP: usize = 3;
/// Names of the timed parts of a step, in order.
pub const PARTS: [&str; 5] = ["batch", "forward", "backward", "norm+clip", "optimizer"];

/// What a calibration measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Calibration {
    /// Timed steps.
    pub steps: usize,
    /// Median milliseconds of one optimizer step (one micro-batch of `main.batch`).
    pub ms_per_step: f64,
    /// Mean milliseconds of each part of [`PARTS`].
    pub ms_per_part: [f64; 5],
}

/// The batches a calibration trains on.
#[derive(Debug, Clone, Copy)]
pub enum Tokens<'a> {
    /// Uniform random token ids, every position real, 2 classes.
    Random,
    /// The micro-batches a run would draw from its encoded train partition with this many classes
    /// (padding, real lengths and labels).
    Data(&'a Encoded, usize),
}

/// Trains the recipe's text model (Contrai's transformer, or a pretrained encoder from a recipe
/// sized by `setup::sized`) for `steps` steps on random tokens (2 classes) and times them.
pub fn calibrate(recipe: &Recipe, steps: usize) -> Result<Calibration> {
    calibrate_on(recipe, steps, Tokens::Random)
}

/// [`calibrate`] on the given batches.
pub fn calibrate_on(recipe: &Recipe, steps: usize, tokens: Tokens) -> Result<Calibration> {
    if steps == 0 {
        return Err(TrainError::Unsupported(
            "calibration needs at least one step".into(),
        ));
    }
    if recipe.model.kind == contrai_recipe::ModelKind::Mlp {
        return Err(TrainError::Unsupported(format!(
            "calibration times a text model on random tokens; a {} model's step is timed by a \
             short `contrai train` instead",
            recipe.model.kind
        )));
    }
    crate::process::setup();
    crate::setup::use_precision(recipe)?;
    let spec = &recipe.model;
    let device = Device::flex().autodiff();
    let classes = match tokens {
        Tokens::Random => 2,
        Tokens::Data(_, classes) => classes,
    };
    let mut model = Classifier::new(spec, classes, 0, recipe.run.seed, &device)?;
    let mut optim = optimizer(recipe);
    let (b, s) = (recipe.main.batch, spec.seq_len);
    let mut x = recipe.run.seed | 1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut batcher = match tokens {
        Tokens::Data(data, _) => Some(Batcher::new(data.len(), b, recipe.run.seed, Cursor::default())?),
        Tokens::Random => None,
    };
    let mut step_ms = Vec::with_capacity(steps);
    let mut parts = [0f64; 5];
    for step in 0..steps + WARMUP {
        let t0 = Instant::now();
        let batch = match (tokens, batcher.as_mut()) {
            (Tokens::Data(data, _), Some(batcher)) => data.batch(&batcher.next_batch(), &device),
            _ => {
                let ids: Vec<i32> = (0..b * s)
                    .map(|_| (2 + rnd() % (spec.vocab as u64 - 2)) as i32)
                    .collect();
                let labels: Vec<i32> = (0..b).map(|_| (rnd() % 2) as i32).collect();
                Batch::Text(TextBatch::new(&ids, &labels, s, &device))
            }
        };
        let t1 = Instant::now();
        let drop = Dropout::new(spec.dropout, recipe.run.seed, step as u64, 0);
        let (t2, mut grads) = if spec.gradient_checkpointing {
            // The forward runs inside the recomputing backward: its time is counted there.
            let drops = [Some(drop)];
            (
                t1,
                step_grads(&model, std::slice::from_ref(&batch), &drops, false, true).0,
            )
        } else {
            let loss = cross_entropy(model.forward(&batch, Some(&drop)), batch.labels());
            let _ = loss.clone().into_scalar::<f32>();
            (
                Instant::now(),
                GradientsParams::from_grads(loss.backward(), &model),
            )
        };
        let t3 = Instant::now();
        if denormals::probing() {
            model.visit(&mut Subnormals { grads: &grads });
        }
        let norm = grad_norm(&model, &grads);
        clip_grads(&model, &mut grads, norm, recipe.main.clip_norm);
        let t4 = Instant::now();
        model = optim.step(recipe.main.lr, model, grads);
        let t5 = Instant::now();
        if step >= WARMUP {
            for (k, (a, z)) in [(t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5)]
                .iter()
                .enumerate()
            {
                parts[k] += (*z - *a).as_secs_f64() * 1e3 / steps as f64;
            }
            step_ms.push((t5 - t0).as_secs_f64() * 1e3);
        }
    }

    Ok(Calibration {
        steps,
        ms_per_step: contrai_stats::median(&step_ms).unwrap_or(f64::NAN),
        ms_per_part: parts,
    })
}

/// Counts the subnormal weights and gradients of the parameters it visits (while probing).
struct Subnormals<'a> {
    grads: &'a GradientsParams,
}

impl ModuleVisitor for Subnormals<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let values = |t: Tensor<D>| t.into_data().try_to_vec::<f32>().unwrap_or_default();
        denormals::tally("parameters", &[], &[&values(param.val())]);
        if let Some(g) = self.grads.get::<D>(param.id) {
            denormals::tally("gradients", &[], &[&values(g)]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Inputs;

    #[test]
    fn a_calibration_on_real_batches_trains_the_datas_classes_and_times_every_part() {
        let mut recipe = Recipe::default();
        recipe.model.vocab = 64;
        recipe.model.seq_len = 8;
        recipe.model.d_model = 16;
        recipe.model.layers = 1;
        recipe.model.heads = 2;
        recipe.model.ffn = 32;
        recipe.main.batch = 8;
        // 40 samples of 3 classes, their tails padding (id 0) as real texts' are.
        let ids = (0..40 * 8)
            .map(|i| if i % 8 < 5 { i * 7 % 61 + 2 } else { 0 })
            .collect();
        let data = Encoded {
            inputs: Inputs::Tokens(ids),
            labels: (0..40).map(|i| i % 3).collect(),
            width: 8,
        };
        let c = calibrate_on(&recipe, 2, Tokens::Data(&data, 3)).unwrap();
        assert_eq!(c.steps, 2);
        assert!(c.ms_per_step > 0.0 && c.ms_per_part.iter().all(|p| p.is_finite() && *p >= 0.0));
        let err = calibrate_on(&recipe, 0, Tokens::Data(&data, 3)).unwrap_err();
        assert!(err.to_string().contains("at least one step"), "{err}");
    }
}
