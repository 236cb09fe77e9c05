//! The facts of a job the preflight rules judge: what trains in which format, how, on what
//! schedule and data, and where each fact came from.

use contrai_recipe::{Decay, Recipe};
use serde::{Deserialize, Serialize};

/// What trains in which floating-point format.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// 32-bit floats.
    Fp32,
    /// IEEE half precision (5 exponent bits: overflows past 65,504).
    Fp16,
    /// bfloat16 (8 exponent bits: fp32's range).
    Bf16,
}

impl Precision {
    /// The format's name, as JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
        }
    }
}

/// How the model's weights are tuned.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tuning {
    /// Every weight trains.
    Full,
    /// LoRA adapters train, the base is frozen.
    Lora,
    /// Another PEFT method (prefix, IA³, adapters …), the base frozen.
    Peft,
}

impl Tuning {
    /// Whether the base is frozen behind adapters.
    pub fn adapters(self) -> bool {
        self != Tuning::Full
    }
}

/// The LR's shape after warmup.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecayShape {
    /// Half a cosine to the floor (the rules' shape).
    Cosine,
    /// A straight line to the floor.
    Linear,
    /// No decay.
    Constant,
    /// Anything else (restarts, inverse square root, on plateau …): not judged.
    Other,
}

impl From<Decay> for DecayShape {
    fn from(d: Decay) -> Self {
        match d {
            Decay::Cosine => DecayShape::Cosine,
            Decay::Linear => DecayShape::Linear,
            Decay::Constant => DecayShape::Constant,
        }
    }
}

/// How often the job writes a checkpoint it can resume from.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "CheckpointCadence"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cadence {
    /// No checkpoint while training.
    Never,
    /// Every this many optimizer steps.
    Steps(u64),
}

/// Where the facts come from: the fixes name that source's own settings.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "FactsSource"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A Contrai recipe.
    Recipe,
    /// Hugging Face `TrainingArguments` / `Trainer`.
    Hf,
    /// A Lightning `Trainer` and `LightningModule`.
    Lightning,
}

/// What is known of a job before its first step; `None` where its source cannot tell.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobFacts {
    /// Where the facts come from (the fixes name its settings).
    pub source: Option<Source>,
    /// The training precision: the autocast format, else the weights' own.
    pub precision: Option<Precision>,
    /// The format the model's config says it was trained in (`torch_dtype` / `dtype`).
    pub model_dtype: Option<Precision>,
    /// The format the recipe asks of Contrai's own engine (`model.precision`), beside a job
    /// whose own settings choose its format.
    pub recipe_precision: Option<Precision>,
    /// The device the job trains on multiplies bf16 matrices natively (PyTorch's oneDNN bf16
    /// path on a CPU, bf16 tensor cores on a GPU); read only when the job trains in bf16.
    pub native_bf16: Option<bool>,
    /// Full fine-tuning, LoRA or another PEFT method.
    pub tuning: Option<Tuning>,
    /// Gradient (activation) checkpointing is on, or the job turns it on.
    pub gradient_checkpointing: Option<bool>,
    /// The checkpointing is reentrant (`use_reentrant=True`, torch's default when unsaid).
    pub reentrant: Option<bool>,
    /// The input embeddings' output requires grad (trainable embeddings or an
    /// `enable_input_require_grads` hook).
    pub input_grads: Option<bool>,
    /// Micro-batches accumulated into one optimizer step.
    pub accumulation: Option<u64>,
    /// The loss is a mean over tokens (causal or masked LM, token classification), so
    /// micro-batches weigh unequal counts.
    pub token_level_loss: Option<bool>,
    /// The loss is normalised over the accumulation window's items (`num_items_in_batch`), not
    /// averaged per micro-batch.
    pub loss_over_window: Option<bool>,
    /// Warmup as a share of the steps (when the job states it so).
    pub warmup_ratio: Option<f64>,
    /// Warmup steps (when the job states them so).
    pub warmup_steps: Option<u64>,
    /// Optimizer steps the schedule spans.
    pub total_steps: Option<u64>,
    /// The LR's shape after warmup.
    pub decay: Option<DecayShape>,
    /// Peak learning rate.
    pub peak_lr: Option<f64>,
    /// Samples a micro-batch, per device.
    pub per_device_batch: Option<u64>,
    /// Data-parallel devices (all ranks).
    pub devices: Option<u64>,
    /// How often a resumable checkpoint is written.
    pub checkpoint_every: Option<Cadence>,
    /// There is validation data the job evaluates on.
    pub eval_split: Option<bool>,
    /// There is a holdout partition, kept for one evaluation at the very end.
    pub holdout: Option<bool>,
}

impl JobFacts {
    /// What a recipe says of its own main phase: precision, schedule, batch, checkpoint cadence,
    /// split shares and LoRA (Contrai's engine trains classifiers, whose loss is per sample).
    pub fn from_recipe(recipe: &Recipe) -> JobFacts {
        let m = &recipe.main;
        let s = &recipe.data.split;
        let precision = match recipe.model.precision {
            contrai_recipe::Precision::F32 => Precision::Fp32,
            contrai_recipe::Precision::Bf16 => Precision::Bf16,
        };
        JobFacts {
            source: Some(Source::Recipe),
            precision: Some(precision),
            recipe_precision: Some(precision),
            tuning: Some(if recipe.model.lora.is_some() {
                Tuning::Lora
            } else {
                Tuning::Full
            }),
            // Contrai's recompute makes each block's input a leaf that requires its gradient:
            // never the re-entrant kind that loses a frozen input's gradient.
            gradient_checkpointing: Some(recipe.model.gradient_checkpointing),
            reentrant: recipe.model.gradient_checkpointing.then_some(false),
            accumulation: Some(m.accumulate as u64),
            token_level_loss: Some(false),
            warmup_ratio: Some(m.warmup),
            total_steps: Some(m.steps),
            decay: Some(m.schedule.into()),
            peak_lr: Some(m.lr),
            per_device_batch: Some(m.batch as u64),
            devices: Some(m.devices as u64),
            checkpoint_every: Some(Cadence::Steps(recipe.run.checkpoint_every)),
            eval_split: Some(s.val > 0.0),
            holdout: Some(s.holdout > 0.0),
            ..JobFacts::default()
        }
    }

    /// Warmup as a share of the steps: the ratio when stated, else steps ÷ total.
    pub fn warmup_share(&self) -> Option<f64> {
        match (self.warmup_ratio, self.warmup_steps, self.total_steps) {
            (Some(r), ..) => Some(r),
            (None, Some(0), _) => Some(0.0),
            (None, Some(w), Some(t)) if t > 0 => Some(w as f64 / t as f64),
            _ => None,
        }
    }

    /// Samples an optimizer step sees: per-device batch × devices × accumulation.
    pub fn effective_batch(&self) -> Option<u64> {
        let b = self.per_device_batch?;
        let d = self.devices?;
        let a = self.accumulation?;
        Some(b.saturating_mul(d).saturating_mul(a))
    }
}
