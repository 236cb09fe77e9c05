//! The pieces of an optimizer step (AdamW, accumulation, the global gradient norm and clipping),
//! evaluation, and the options and results of a run; the loop itself is in [`crate::lifecycle`].

use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{AdamWConfig, GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor};
use contrai_recipe::Recipe;
use serde::Serialize;

use crate::batch::Encoded;
use crate::dropout::Dropout;
use crate::error::{Result, TrainError};
use crate::model::{Batch, Classifier, cross_entropy};

/// Where messages go (the CLI prints them; tests collect them).
pub trait Log {
    /// A progress line.
    fn info(&self, msg: &str);
    /// Something the user should know (a skipped checkpoint ...).
    fn warn(&self, msg: &str);
}

/// Prints to stderr.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stderr;

impl Log for Stderr {
    fn info(&self, msg: &str) {
        eprintln!("{msg}");
    }
    fn warn(&self, msg: &str) {
        eprintln!("warning: {msg}");
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The recipe (on `resume`, the run directory's own `recipe.toml` wins).
    pub recipe: Recipe,
    /// The run directory.
    pub run_dir: PathBuf,
    /// Continue from the newest valid checkpoint.
    pub resume: bool,
    /// Stop once this many steps are done (a planned interruption; resume continues).
    pub stop_after: Option<u64>,
    /// Draw a progress bar on stderr (hidden anyway when stderr is not a terminal).
    pub progress_bar: bool,
    /// Test hook: poison the loss of this global step (1-based) with NaN, once per process, to
    /// exercise the non-finite guard.
    pub inject_nonfinite_at: Option<u64>,
}

impl Options {
    /// Options for a fresh run of `recipe` in `run_dir`.
    pub fn new(recipe: Recipe, run_dir: impl Into<PathBuf>) -> Options {
        Options {
            recipe,
            run_dir: run_dir.into(),
            resume: false,
            stop_after: None,
            progress_bar: false,
            inject_nonfinite_at: None,
        }
    }
}

/// `final/eval.json`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct FinalEval {
    /// Steps trained.
    pub step: u64,
    /// Class names in index order.
    pub classes: Vec<String>,
    /// Holdout samples.
    pub holdout_samples: usize,
    /// Mean holdout loss.
    pub holdout_loss: f32,
    /// Holdout accuracy in [0, 1].
    pub holdout_accuracy: f32,
    /// Final validation loss.
    pub val_loss: f32,
    /// Final validation accuracy.
    pub val_accuracy: f32,
    /// The best checkpoint's step and validation loss.
    pub best: Option<(u64, f32)>,
    /// Times the holdout was read: 1, more when a session died after reading it (`holdout-reads`).
    pub holdout_reads: usize,
    /// The step at which main ended and why (`main_stable`, `end_main_overfitting`, `main_complete`).
    #[serde(default)]
    pub main_end: Option<(u64, String)>,
    /// Steps the recipe planned for all phases (the run may have needed fewer).
    #[serde(default)]
    pub planned_steps: u64,
    /// Share of zeros in each pruned module of the final weights.
    #[serde(default)]
    pub sparsity: std::collections::BTreeMap<String, f64>,
    /// The int8 model, when `refine.quantize = "int8"`.
    #[serde(default)]
    pub int8: Option<Int8Eval>,
    /// The distilled student, when `refine.distill.enabled`.
    #[serde(default)]
    pub student: Option<crate::export::Variant>,
}

/// The int8 post-training quantization of the final model.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Int8Eval {
    /// Whether it was kept (its validation accuracy dropped by at most `refine.max_drop` points).
    pub kept: bool,
    /// Its validation accuracy.
    pub val_accuracy: f32,
    /// Its holdout accuracy (same single read of the holdout).
    pub holdout_accuracy: f32,
    /// Validation accuracy points lost to quantization.
    pub drop_points: f64,
    /// Bytes of its record.
    pub bytes: u64,
    /// Bytes of the f32 record.
    pub dense_bytes: u64,
}

/// What a call to [`train`] did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Steps done.
    pub step: u64,
    /// Whether the phase finished (false after `stop_after`).
    pub finished: bool,
    /// The step resumed from, if any.
    pub resumed_from: Option<u64>,
    /// The final evaluation, when finished.
    pub eval: Option<FinalEval>,
    /// Mean milliseconds an optimizer step took in this session (evaluation and checkpoints aside).
    pub ms_per_step: f64,
    /// Mean milliseconds a checkpoint took to write in this session (0 when none was written).
    pub ms_per_checkpoint: f64,
    /// Effective batch.
    pub effective_batch: usize,
}

/// `data` in order, as batches of `batch` samples (the last one shorter).
pub fn eval_batches<'a>(
    data: &'a Encoded,
    batch: usize,
    device: &'a Device,
) -> impl Iterator<Item = Batch> + 'a {
    let batch = batch.max(1);
    (0..data.len()).step_by(batch).map(move |start| {
        let rows: Vec<usize> = (start..(start + batch).min(data.len())).collect();
        data.batch(&rows, device)
    })
}

/// The batch evaluation runs in (no gradients: twice the training batch, at least 32).
pub fn eval_batch(recipe: &Recipe) -> usize {
    (recipe.main.batch * 2).max(32)
}

/// Mean loss and accuracy of `model` on `data`, in batches of `batch`.
pub fn evaluate(model: &Classifier, data: &Encoded, batch: usize, device: &Device) -> (f32, f32) {
    if data.is_empty() {
        return (f32::NAN, f32::NAN);
    }
    let mut loss = 0f64;
    let mut correct = 0i64;
    for b in eval_batches(data, batch, device) {
        let n = b.len();
        let logits = model.forward(&b, None);
        let pred = logits.clone().argmax(1).reshape([n]);
        correct += pred.equal(b.labels()).int().sum().into_scalar::<i64>();
        loss += f64::from(cross_entropy(logits, b.labels()).into_scalar::<f32>()) * n as f64;
    }
    (
        (loss / data.len() as f64) as f32,
        correct as f32 / data.len() as f32,
    )
}

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
/// the loss by NaN (the test hook of the non-finite guard).
pub fn step_grads(
    model: &Classifier,
    batches: &[Batch],
    drops: &[Option<Dropout>],
    poison: bool,
) -> (GradientsParams, f32) {
    let total: usize = batches.iter().map(Batch::len).sum();
    let mut acc = GradientsAccumulator::<Classifier>::new();
    let mut single = None;
    let mut loss_sum = 0f64;
    for (b, d) in batches.iter().zip(drops) {
        let logits = model.forward(b, d.as_ref());
        let loss = cross_entropy(logits, b.labels());
        let w = if poison {
            f64::NAN
        } else {
            b.len() as f64 / total as f64
        };
        let scaled = loss.mul_scalar(w);
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

/// Refuses what the trainer cannot run, before any work.
pub fn check(recipe: &Recipe) -> Result<()> {
    recipe
        .validate()
        .map_err(|(k, m)| TrainError::Unsupported(format!("`{k}` {m}")))?;
    if recipe.model.kind == "mlp" {
        check_mlp(recipe)?;
    }
    if recipe.main.devices != 1 {
        return Err(TrainError::Unsupported(format!(
            "main.devices = {}: data-parallel training is not available yet on the CPU backend; use 1",
            recipe.main.devices
        )));
    }
    Ok(())
}

/// What an MLP on numeric features cannot be asked for.
fn check_mlp(recipe: &Recipe) -> Result<()> {
    let refuse = |m: &str| Err(TrainError::Unsupported(format!("model.kind = \"mlp\": {m}")));
    if recipe.data.path.is_empty() {
        return refuse(
            "set data.path to a file whose `data.text` field holds each sample's numeric features \
             (the built-in demo is text)",
        );
    }
    if recipe.data.dedup == "near" {
        return refuse(
            "data.dedup = \"near\" compares words; use \"exact\" or \"none\" for numeric features",
        );
    }
    if recipe.contract.prune_heads {
        return refuse("contract.prune_heads needs attention heads; an MLP has none");
    }
    Ok(())
}

/// Writes `v` as pretty JSON, atomically.
pub fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(v).map_err(|e| TrainError::Corrupt {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    contrai_data::write::write_atomic(path, &bytes)?;
    Ok(())
}

/// Reads JSON written by [`write_json`].
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = std::fs::read(path).map_err(|e| TrainError::io(path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| TrainError::Corrupt {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// A Burn record that could not be written or read at `path`.
pub(crate) fn record_err(path: &Path, e: impl std::fmt::Display) -> TrainError {
    TrainError::Record {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Writes the model's weights as safetensors, atomically.
pub fn save_safetensors(model: &Classifier, path: &Path) -> Result<()> {
    use burn::store::{ModuleSnapshot, SafetensorsStore};
    // Paths as the modules name them (`blocks.0.ffn.up.weight`), without the enum variant.
    let mut store = SafetensorsStore::from_bytes(None).skip_enum_variants(true);
    model.save_into(&mut store).map_err(|e| record_err(path, e))?;
    let bytes = store.get_bytes().map_err(|e| record_err(path, e))?;
    contrai_data::write::write_atomic(path, &bytes)?;
    Ok(())
}
