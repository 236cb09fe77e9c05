//! `final/eval.json` and `final/model-card.json`: the single holdout evaluation and what each
//! exported model is (parameters, zeros, bytes, accuracy, latency).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `final/eval.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalEval {
    /// Steps trained.
    pub step: u64,
    /// Class names in index order.
    pub classes: Vec<String>,
    /// Holdout samples.
    pub holdout_samples: usize,
    /// Mean holdout loss.
    #[serde(with = "crate::nonfinite")]
    pub holdout_loss: f32,
    /// Holdout accuracy in [0, 1].
    #[serde(with = "crate::nonfinite")]
    pub holdout_accuracy: f32,
    /// Final validation loss.
    #[serde(with = "crate::nonfinite")]
    pub val_loss: f32,
    /// Final validation accuracy.
    #[serde(with = "crate::nonfinite")]
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
    pub sparsity: BTreeMap<String, f64>,
    /// The int8 model, when `refine.quantize` lists `int8`.
    #[serde(default)]
    pub int8: Option<QuantEval>,
    /// The int4 model, when `refine.quantize` lists `int4` and the engine made one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int4: Option<QuantEval>,
    /// The distilled student, when `refine.distill.enabled`.
    #[serde(default)]
    pub student: Option<Variant>,
}

/// What a quantized variant's cost is measured in: validation accuracy points for a classifier,
/// the rise of validation perplexity in percent for a language model.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Measure {
    /// Accuracy points lost.
    #[default]
    Accuracy,
    /// Perplexity gained, in percent.
    Perplexity,
}

impl Measure {
    fn is_accuracy(&self) -> bool {
        *self == Measure::Accuracy
    }
}

/// A post-training quantization of the final model (int8 or int4 weights).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantEval {
    /// Whether it was kept (it cost at most `refine.max_drop`, in [`Self::measure`]).
    pub kept: bool,
    /// Its validation accuracy.
    #[serde(with = "crate::nonfinite")]
    #[cfg_attr(feature = "schema", schemars(with = "f64"))]
    pub val_accuracy: f32,
    /// Its holdout accuracy (same single read of the holdout).
    #[serde(with = "crate::nonfinite")]
    #[cfg_attr(feature = "schema", schemars(with = "f64"))]
    pub holdout_accuracy: f32,
    /// What quantization cost: validation accuracy points, or perplexity percent (see `measure`).
    pub drop_points: f64,
    /// What `drop_points` counts.
    #[serde(default, skip_serializing_if = "Measure::is_accuracy")]
    pub measure: Measure,
    /// Its validation perplexity and the dense model's, for a language model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_perplexity: Option<(f64, f64)>,
    /// Its holdout perplexity, for a language model (same single read of the holdout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holdout_perplexity: Option<f64>,
    /// Bytes of its record.
    pub bytes: u64,
    /// Bytes of the f32 record.
    pub dense_bytes: u64,
}

/// One exported model, as the model card and the compression table show it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Variant {
    /// `f32`, `int8`, `pruned`, `student` ...
    pub name: String,
    /// Its file, relative to the run directory (None when it was not kept).
    pub file: Option<String>,
    /// Parameters (zeros included).
    pub parameters: usize,
    /// Share of the weight-matrix entries that are exactly zero.
    pub zero_weights: f64,
    /// Bytes on disk.
    pub bytes: u64,
    /// Validation accuracy.
    #[serde(with = "crate::nonfinite")]
    pub val_accuracy: f32,
    /// Holdout accuracy.
    #[serde(with = "crate::nonfinite")]
    pub holdout_accuracy: f32,
    /// Mean holdout loss.
    #[serde(with = "crate::nonfinite")]
    pub holdout_loss: f32,
    /// Median CPU milliseconds of a forward pass over `latency_batch` validation samples.
    pub latency_ms: Option<f64>,
    /// Why it was refused, or how it was made.
    pub note: String,
}

/// `final/model-card.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// The model's settings (the recipe's `[model]`), for a model Contrai built; None for a job's
    /// own model (the PyTorch engine's: [`Self::architecture`] names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<contrai_recipe::recipe::Model>,
    /// The class of a job's own model (`LlamaForCausalLM` ...); its exported `config.json` holds
    /// the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Class names in index order.
    pub classes: Vec<String>,
    /// Parameters of the f32 model.
    pub parameters: usize,
    /// Share of zeros of each pruned module.
    pub sparsity: BTreeMap<String, f64>,
    /// Whether training recomputed each block's activations in the backward pass
    /// (`model.gradient_checkpointing`).
    #[serde(default)]
    pub gradient_checkpointing: bool,
    /// Samples a batch of the latency column.
    pub latency_batch: usize,
    /// The f32 model, the int8 model, the student ...
    pub variants: Vec<Variant>,
}
