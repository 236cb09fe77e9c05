//! A short measured run of a recipe's model: the time of a training step and of its parts, for
//! `contrai plan --calibrate` and for profiling.

use std::time::Instant;

use burn::optim::GradientsParams;
use burn::tensor::Device;
use contrai_recipe::Recipe;

use crate::dropout::Dropout;
use crate::error::{Result, TrainError};
use crate::model::{Batch, Classifier, TextBatch, cross_entropy};
use crate::step::{clip_grads, grad_norm, optimizer};

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

/// Trains the recipe's text model (Contrai's transformer, or a pretrained encoder from a recipe
/// sized by `setup::sized`) for `steps` steps on random tokens (2 classes) and times them.
pub fn calibrate(recipe: &Recipe, steps: usize) -> Result<Calibration> {
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
    crate::alloc::keep_freed_memory();
    let spec = &recipe.model;
    let device = Device::flex().autodiff();
    let mut model = Classifier::new(spec, 2, 0, recipe.run.seed, &device)?;
    let mut optim = optimizer(recipe);
    let (b, s) = (recipe.main.batch, spec.seq_len);
    let mut x = recipe.run.seed | 1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut step_ms = Vec::with_capacity(steps);
    let mut parts = [0f64; 5];
    for step in 0..steps + WARMUP {
        let t0 = Instant::now();
        let ids: Vec<i32> = (0..b * s)
            .map(|_| (2 + rnd() % (spec.vocab as u64 - 2)) as i32)
            .collect();
        let labels: Vec<i32> = (0..b).map(|_| (rnd() % 2) as i32).collect();
        let batch = Batch::Text(TextBatch::new(&ids, &labels, s, &device));
        let t1 = Instant::now();
        let drop = Dropout::new(spec.dropout, recipe.run.seed, step as u64, 0);
        let loss = cross_entropy(model.forward(&batch, Some(&drop)), batch.labels());
        let _ = loss.clone().into_scalar::<f32>();
        let t2 = Instant::now();
        let mut grads = GradientsParams::from_grads(loss.backward(), &model);
        let t3 = Instant::now();
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
