//! The pre-flight check: a job's configuration read before step 1 against the lifecycle's rules
//! (`../shared/DESIGN.md` §1), for a recipe (`contrai check`), a Hugging Face or a Lightning job
//! (`contrai.preflight`, and the callbacks before their first step).
//!
//! | finding | when | severity | fix |
//! | --- | --- | --- | --- |
//! | `fp16_on_bf16_model` | fp16 training (autocast or fp16 weights) of a model whose config says bfloat16 | error | bf16 |
//! | `bf16_not_native` | bf16 training on a device that has no native bf16 matrix multiply (a CPU without AVX-512 or AMX, a GPU before Ampere): every matmul takes a slow fallback | warning | fp32 |
//! | `checkpointing_without_input_grads` | PEFT adapters, reentrant gradient checkpointing, and the input embeddings' output needs no grad: the checkpointed blocks' adapters get no gradient | error | `enable_input_require_grads()`, or `use_reentrant=False` |
//! | `reentrant_checkpointing_with_lora` | PEFT adapters under reentrant gradient checkpointing (input gradients on or unknown) | warning | `use_reentrant=False` |
//! | `loss_not_normalised` | accumulation > 1 and a token-level loss averaged per micro-batch, not over the window's tokens | warning | normalise over the window (`num_items_in_batch`) |
//! | `warmup_outside_range` | linear warmup outside [`WARMUP`] (2–5 %) of the steps | warning | [`WARMUP_FIX`] (3 %) |
//! | `decay_not_cosine` | a linear or constant LR after warmup, where the rules decay along a cosine | warning | cosine |
//! | `seed_article_failure` | LoRA, peak LR ≥ [`ARTICLE_LR`], linear decay and warmup above 5 %: the first seed article's plateau (it replaces the two findings above) | error | cosine, 3 % warmup, a lower peak |
//! | `effective_batch_outside_range` | per-device batch × devices × accumulation outside [`EFFECTIVE_BATCH`] (16–64) | warning | accumulation (or batch) to land near 32 |
//! | `sparse_checkpoints` | no step checkpoints, or fewer than one every [`CHECKPOINT_EVERY`] (50) steps | warning | every 50 steps |
//! | `no_eval_split` | no validation data: no guard of the lifecycle can read the validation loss | error | a validation split |
//! | `no_holdout` | no holdout partition to evaluate once at the end | warning | a holdout share |
//!
//! A fact a source does not know is `None`, and a rule that needs it stays silent.

use std::ops::RangeInclusive;

use contrai_recipe::{Decay, Recipe};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Warmup share of the phase's steps the rules give (main: 2–5 %).
pub const WARMUP: RangeInclusive<f64> = 0.02..=0.05;
/// The warmup share a fix sets (the recipe's default, 3 %).
pub const WARMUP_FIX: f64 = 0.03;
/// Effective batch the rules recommend (per-device batch × devices × accumulation).
pub const EFFECTIVE_BATCH: RangeInclusive<u64> = 16..=64;
/// The effective batch a fix aims at (the recipe's default).
pub const EFFECTIVE_BATCH_FIX: u64 = 32;
/// Most optimizer steps between two checkpoints ("every ~50 steps, not 500").
pub const CHECKPOINT_EVERY: u64 = 50;
/// Lowest peak LR of the first seed article's failure (its LoRA job ran at 2e-4).
pub const ARTICLE_LR: f64 = 1e-4;

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
    /// What a recipe says of its own main phase: schedule, batch, checkpoint cadence, split
    /// shares and LoRA (Contrai's engine trains f32 classifiers, whose loss is per sample).
    pub fn from_recipe(recipe: &Recipe) -> JobFacts {
        let m = &recipe.main;
        let s = &recipe.data.split;
        JobFacts {
            source: Some(Source::Recipe),
            precision: Some(Precision::Fp32),
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

/// How much a finding matters.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "PreflightSeverity"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Against the rules: the job runs, worse than it could.
    Warning,
    /// The job is broken or fails as the rules know it to: fix it before step 1.
    Error,
}

impl Severity {
    /// The severity's name, as JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// Every pre-flight finding (the module's table).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "PreflightKind"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// fp16 training of a model whose config says bfloat16.
    Fp16OnBf16Model,
    /// bf16 training on a device without native bf16 matrix multiplies.
    Bf16NotNative,
    /// PEFT under reentrant checkpointing with no input gradients: adapters get no gradient.
    CheckpointingWithoutInputGrads,
    /// PEFT under reentrant checkpointing.
    ReentrantCheckpointingWithLora,
    /// Accumulation of a token-level loss averaged per micro-batch.
    LossNotNormalised,
    /// Warmup outside 2–5 % of the steps.
    WarmupOutsideRange,
    /// Linear or no decay where the rules decay along a cosine.
    DecayNotCosine,
    /// The first seed article's LoRA job: LR ≥ 1e-4, long linear warmup, linear decay.
    SeedArticleFailure,
    /// Effective batch outside 16–64.
    EffectiveBatchOutsideRange,
    /// Checkpoints rarer than every 50 steps, or none.
    SparseCheckpoints,
    /// No validation data.
    NoEvalSplit,
    /// No holdout partition.
    NoHoldout,
}

impl FindingKind {
    /// The kind's snake_case name, as JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::Fp16OnBf16Model => "fp16_on_bf16_model",
            FindingKind::Bf16NotNative => "bf16_not_native",
            FindingKind::CheckpointingWithoutInputGrads => "checkpointing_without_input_grads",
            FindingKind::ReentrantCheckpointingWithLora => "reentrant_checkpointing_with_lora",
            FindingKind::LossNotNormalised => "loss_not_normalised",
            FindingKind::WarmupOutsideRange => "warmup_outside_range",
            FindingKind::DecayNotCosine => "decay_not_cosine",
            FindingKind::SeedArticleFailure => "seed_article_failure",
            FindingKind::EffectiveBatchOutsideRange => "effective_batch_outside_range",
            FindingKind::SparseCheckpoints => "sparse_checkpoints",
            FindingKind::NoEvalSplit => "no_eval_split",
            FindingKind::NoHoldout => "no_holdout",
        }
    }

    /// The kind's severity (the module's table).
    pub fn severity(self) -> Severity {
        match self {
            FindingKind::Fp16OnBf16Model
            | FindingKind::CheckpointingWithoutInputGrads
            | FindingKind::SeedArticleFailure
            | FindingKind::NoEvalSplit => Severity::Error,
            FindingKind::Bf16NotNative
            | FindingKind::ReentrantCheckpointingWithLora
            | FindingKind::LossNotNormalised
            | FindingKind::WarmupOutsideRange
            | FindingKind::DecayNotCosine
            | FindingKind::EffectiveBatchOutsideRange
            | FindingKind::SparseCheckpoints
            | FindingKind::NoHoldout => Severity::Warning,
        }
    }
}

/// One thing wrong with a job's configuration.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "PreflightFinding"))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// What is wrong.
    pub kind: FindingKind,
    /// How much it matters.
    pub severity: Severity,
    /// One sentence: what is wrong, why, and the fix.
    pub message: String,
    /// The values read.
    pub evidence: Value,
}

impl Finding {
    /// A finding of `kind` at its severity.
    fn new(kind: FindingKind, message: String, evidence: Value) -> Finding {
        Finding {
            kind,
            severity: kind.severity(),
            message,
            evidence,
        }
    }
}

/// Every finding of `facts`, in the module table's order; none for a job within the rules.
pub fn check(facts: &JobFacts) -> Vec<Finding> {
    let article = seed_article_failure(facts);
    let schedule = if article.is_some() {
        [None, None]
    } else {
        [warmup_outside_range(facts), decay_not_cosine(facts)]
    };
    [
        fp16_on_bf16_model(facts),
        bf16_not_native(facts),
        checkpointing_with_adapters(facts),
        loss_not_normalised(facts),
    ]
    .into_iter()
    .chain(schedule)
    .chain([
        article,
        effective_batch_outside_range(facts),
        sparse_checkpoints(facts),
        no_eval_split(facts),
        no_holdout(facts),
    ])
    .flatten()
    .collect()
}

/// A setting as the facts' source names it (`None`: the framework-neutral words).
fn setting(source: Option<Source>, recipe: &str, hf: &str, lightning: &str, neutral: &str) -> String {
    match source {
        Some(Source::Recipe) => recipe,
        Some(Source::Hf) => hf,
        Some(Source::Lightning) => lightning,
        None => neutral,
    }
    .to_string()
}

/// A share as a percentage.
fn pct(share: f64) -> String {
    format!("{} %", number(100.0 * share))
}

/// A number to one decimal, without a trailing `.0`.
fn number(x: f64) -> String {
    let s = format!("{x:.1}");
    s.strip_suffix(".0").map_or(s.clone(), str::to_string)
}

/// fp16 on a model whose config says bfloat16: activations outgrow fp16's range.
fn fp16_on_bf16_model(f: &JobFacts) -> Option<Finding> {
    if f.precision? != Precision::Fp16 || f.model_dtype? != Precision::Bf16 {
        return None;
    }
    let fix = setting(
        f.source,
        "train in bf16",
        "set bf16=True and fp16=False",
        "set precision=\"bf16-mixed\"",
        "train in bf16",
    );
    Some(Finding::new(
        FindingKind::Fp16OnBf16Model,
        format!(
            "the model's config says bfloat16 but the job trains in fp16, whose range its activations can outgrow (intermittent NaN, huge gradient norms): {fix}."
        ),
        json!({"precision": "fp16", "model_dtype": "bf16"}),
    ))
}

/// bf16 on a device that cannot multiply bf16 matrices natively: PyTorch falls back to a
/// reference kernel (37 times slower than fp32 for SmolLM2-135M under LoRA on an AMD Zen 3).
fn bf16_not_native(f: &JobFacts) -> Option<Finding> {
    if f.precision? != Precision::Bf16 || f.native_bf16? {
        return None;
    }
    let fix = setting(
        f.source,
        "train in fp32",
        "set bf16=False (TRL's SFTConfig turns it on by default)",
        "set precision=\"32-true\"",
        "train in fp32",
    );
    Some(Finding::new(
        FindingKind::Bf16NotNative,
        format!(
            "the job trains in bf16 on a device with no native bf16 matrix multiply (a CPU without AVX-512 or AMX, a GPU before Ampere), where every matmul takes a fallback kernel tens of times slower than fp32: {fix}."
        ),
        json!({"precision": "bf16", "native_bf16": false}),
    ))
}

/// PEFT under reentrant checkpointing: without input gradients the checkpointed blocks' adapters
/// get no gradient (an error); with them it trains, but reentrant checkpointing is the fragile
/// variant (DDP, frozen inputs) PyTorch itself advises against (a warning).
fn checkpointing_with_adapters(f: &JobFacts) -> Option<Finding> {
    let tuning = f.tuning?;
    if !tuning.adapters() || f.gradient_checkpointing != Some(true) || f.reentrant != Some(true) {
        return None;
    }
    let non_reentrant = setting(
        f.source,
        "use_reentrant=False",
        "gradient_checkpointing_kwargs={\"use_reentrant\": False}",
        "gradient_checkpointing_enable(gradient_checkpointing_kwargs={\"use_reentrant\": False})",
        "use_reentrant=False",
    );
    let evidence = json!({
        "tuning": tuning,
        "gradient_checkpointing": true,
        "reentrant": true,
        "input_grads": f.input_grads,
    });
    if f.input_grads == Some(false) {
        return Some(Finding::new(
            FindingKind::CheckpointingWithoutInputGrads,
            format!(
                "reentrant gradient checkpointing of a frozen base whose input embeddings need no gradient gives the adapters inside the checkpointed blocks no gradient at all: call model.enable_input_require_grads() before training, or pass {non_reentrant}."
            ),
            evidence,
        ));
    }
    Some(Finding::new(
        FindingKind::ReentrantCheckpointingWithLora,
        format!(
            "adapters train under reentrant gradient checkpointing, which gives them gradients only while the input embeddings' output requires grad and fails under DDP with unused parameters: pass {non_reentrant}."
        ),
        evidence,
    ))
}

/// A token-level loss averaged per micro-batch weighs each micro-batch's tokens by 1 / its own
/// count, not 1 / the window's: accumulation then differs from the one large batch it stands for.
fn loss_not_normalised(f: &JobFacts) -> Option<Finding> {
    let accumulation = f.accumulation?;
    if accumulation <= 1 || f.token_level_loss != Some(true) || f.loss_over_window != Some(false) {
        return None;
    }
    let fix = setting(
        f.source,
        "normalise the loss over the window's tokens",
        "let the loss see num_items_in_batch (a model whose forward takes **kwargs, or compute_loss_func=) so it is summed over the window's tokens and divided once",
        "sum each micro-batch's token losses and divide by the token count of the whole accumulation window",
        "sum each micro-batch's token losses and divide by the token count of the whole accumulation window",
    );
    Some(Finding::new(
        FindingKind::LossNotNormalised,
        format!(
            "gradient accumulation over {accumulation} micro-batches averages a token-level loss per micro-batch, so a micro-batch of few tokens weighs as much as one of many and the step is not the large batch it stands for: {fix}."
        ),
        json!({"accumulation": accumulation, "token_level_loss": true, "loss_over_window": false}),
    ))
}

/// The warmup a fix sets, as the source writes it.
fn warmup_fix(f: &JobFacts) -> String {
    let steps = f
        .total_steps
        .map(|t| contrai_recipe::schedule::warmup_steps(t, WARMUP_FIX));
    match (f.source, steps) {
        (Some(Source::Recipe), _) => format!("main.warmup = {WARMUP_FIX}"),
        (Some(Source::Hf), Some(s)) => format!("warmup_steps={s}"),
        (Some(Source::Hf), None) => format!("warmup_steps={WARMUP_FIX}"),
        (_, Some(s)) => format!("a linear warmup of {s} steps ({})", pct(WARMUP_FIX)),
        (_, None) => format!("a linear warmup of {} of the steps", pct(WARMUP_FIX)),
    }
}

/// Warmup outside 2–5 % of the steps: too short takes large steps from random adapters or a
/// cold optimizer state; too long wastes the peak and can look like stability.
fn warmup_outside_range(f: &JobFacts) -> Option<Finding> {
    let share = f.warmup_share()?;
    if share.is_nan() || WARMUP.contains(&share) {
        return None;
    }
    let of = f
        .total_steps
        .map_or("the steps".to_string(), |t| format!("the {t} steps"));
    let what = if share < *WARMUP.start() {
        "too short to let the optimizer's moments settle before the peak LR"
    } else {
        "long enough to hold back the steps meant for the peak LR, a slow start that can pass for stability"
    };
    Some(Finding::new(
        FindingKind::WarmupOutsideRange,
        format!(
            "warmup takes {} of {of}, outside the {}–{} the rules give and {what}: set {}.",
            pct(share),
            number(100.0 * WARMUP.start()),
            pct(*WARMUP.end()),
            warmup_fix(f)
        ),
        json!({"warmup_share": share, "warmup_steps": f.warmup_steps, "total_steps": f.total_steps}),
    ))
}

/// The setting that gives a cosine decay, as the source writes it.
fn cosine_fix(source: Option<Source>) -> String {
    setting(
        source,
        "main.schedule = \"cosine\"",
        "lr_scheduler_type=\"cosine\"",
        "a cosine schedule (transformers' get_cosine_schedule_with_warmup, interval \"step\")",
        "a cosine decay",
    )
}

/// A linear or constant LR after warmup, where the rules decay along a cosine.
fn decay_not_cosine(f: &JobFacts) -> Option<Finding> {
    let decay = f.decay?;
    let what = match decay {
        DecayShape::Linear => "falls in a straight line",
        DecayShape::Constant => "stays at its peak",
        DecayShape::Cosine | DecayShape::Other => return None,
    };
    Some(Finding::new(
        FindingKind::DecayNotCosine,
        format!(
            "after warmup the LR {what}, where the rules decay it along a cosine that slows down in the last steps so the weights settle instead of still striding: use {}.",
            cosine_fix(f.source)
        ),
        json!({"decay": decay}),
    ))
}

/// The first seed article's failure: a LoRA job at 2e-4 with 10 % linear warmup and linear
/// decay sawed on a plateau for ~1,000 steps; cosine with 3 % warmup and a lower peak fixed it.
fn seed_article_failure(f: &JobFacts) -> Option<Finding> {
    let lr = f.peak_lr?;
    let share = f.warmup_share()?;
    if f.tuning? != Tuning::Lora
        || f.decay? != DecayShape::Linear
        || lr < ARTICLE_LR
        || share <= *WARMUP.end()
    {
        return None;
    }
    let lower = setting(
        f.source,
        "a lower main.lr",
        "a lower learning_rate",
        "a lower peak LR",
        "a lower peak LR",
    );
    Some(Finding::new(
        FindingKind::SeedArticleFailure,
        format!(
            "LoRA at LR {lr:e} with {} linear warmup and linear decay is the first seed article's failing job (its loss sawed on a plateau for ~1,000 steps while validation stood still): use {}, {} and {lower} (the article's fix went to 5e-5).",
            pct(share),
            cosine_fix(f.source),
            warmup_fix(f)
        ),
        json!({"tuning": "lora", "peak_lr": lr, "warmup_share": share, "decay": "linear"}),
    ))
}

/// The accumulation (or per-device batch) that brings the effective batch near 32.
fn batch_fix(f: &JobFacts, per_device: u64, devices: u64) -> String {
    let per_step = per_device.saturating_mul(devices).max(1);
    let (acc, batch) = if per_step <= *EFFECTIVE_BATCH.end() {
        let acc = ((EFFECTIVE_BATCH_FIX as f64 / per_step as f64).round() as u64).max(1);
        (acc, per_device)
    } else {
        (1, (EFFECTIVE_BATCH_FIX / devices.max(1)).max(1))
    };
    let target = batch.saturating_mul(devices).saturating_mul(acc);
    let set = match f.source {
        Some(Source::Recipe) => format!("main.batch = {batch}, main.accumulate = {acc}"),
        Some(Source::Hf) => format!("per_device_train_batch_size={batch}, gradient_accumulation_steps={acc}"),
        Some(Source::Lightning) => format!("a batch size of {batch} and accumulate_grad_batches={acc}"),
        None => format!("a per-device batch of {batch} and {acc} accumulated"),
    };
    format!("{set} (effective batch {target})")
}

/// Effective batch outside 16–64: too small is gradient noise that looks like convergence, too
/// large generalises worse.
fn effective_batch_outside_range(f: &JobFacts) -> Option<Finding> {
    let effective = f.effective_batch()?;
    if EFFECTIVE_BATCH.contains(&effective) {
        return None;
    }
    let (b, d, a) = (f.per_device_batch?, f.devices?, f.accumulation?);
    let what = if effective < *EFFECTIVE_BATCH.start() {
        "small enough for gradient noise to pass for convergence"
    } else {
        "large enough to settle in sharp minima that generalise worse"
    };
    Some(Finding::new(
        FindingKind::EffectiveBatchOutsideRange,
        format!(
            "the effective batch is {effective} ({b} per device × {d} device{} × {a} accumulated), outside the {}–{} the rules recommend and {what}: set {}.",
            if d == 1 { "" } else { "s" },
            EFFECTIVE_BATCH.start(),
            EFFECTIVE_BATCH.end(),
            batch_fix(f, b, d)
        ),
        json!({"effective_batch": effective, "per_device_batch": b, "devices": d, "accumulation": a}),
    ))
}

/// No step checkpoints, or fewer than one every 50 steps: a preempted job loses what it trained
/// since the last one.
fn sparse_checkpoints(f: &JobFacts) -> Option<Finding> {
    let cadence = f.checkpoint_every?;
    let what = match cadence {
        Cadence::Steps(n) if n <= CHECKPOINT_EVERY => return None,
        Cadence::Steps(n) => format!("checkpoints only every {n} steps"),
        Cadence::Never => "writes no checkpoint while training".to_string(),
    };
    let fix = setting(
        f.source,
        &format!("run.checkpoint_every = {CHECKPOINT_EVERY}"),
        &format!("save_strategy=\"steps\", save_steps={CHECKPOINT_EVERY}"),
        &format!("ModelCheckpoint(every_n_train_steps={CHECKPOINT_EVERY})"),
        &format!("a checkpoint every {CHECKPOINT_EVERY} steps"),
    );
    Some(Finding::new(
        FindingKind::SparseCheckpoints,
        format!(
            "the job {what}, so a preempted or crashed job loses everything since the last one: set {fix}."
        ),
        json!({"checkpoint_every": cadence}),
    ))
}

/// No validation data: overfitting, stability, the contraction guard and the best checkpoint all
/// read the validation loss.
fn no_eval_split(f: &JobFacts) -> Option<Finding> {
    if f.eval_split? {
        return None;
    }
    let fix = setting(
        f.source,
        "split the data with a validation share (contrai data split, data.split.val)",
        "pass eval_dataset= (with eval_strategy=\"steps\", eval_steps=50)",
        "give fit() val_dataloaders and define validation_step",
        "hold out a validation split",
    );
    Some(Finding::new(
        FindingKind::NoEvalSplit,
        format!(
            "the job has no validation data, so nothing can see overfitting, a plateau or a worse checkpoint, and no guard of the lifecycle can act: {fix}."
        ),
        json!({"eval_split": false}),
    ))
}

/// No holdout partition: the final score is then measured on data the run was tuned on.
fn no_holdout(f: &JobFacts) -> Option<Finding> {
    if f.holdout? {
        return None;
    }
    let fix = setting(
        f.source,
        "split the data with a holdout share (contrai data split, data.split.holdout)",
        "keep a holdout dataset apart (ContraiCallback(holdout_dataset=...))",
        "keep a holdout dataset apart (ContraiCallback(holdout_dataset=...))",
        "keep a holdout partition apart",
    );
    Some(Finding::new(
        FindingKind::NoHoldout,
        format!(
            "the data has no holdout partition, so the final score is measured on data the run was steered by (its validation split): {fix}."
        ),
        json!({"holdout": false}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job within every rule: what each test then breaks one fact of.
    fn clean() -> JobFacts {
        JobFacts {
            source: Some(Source::Hf),
            precision: Some(Precision::Bf16),
            model_dtype: Some(Precision::Bf16),
            native_bf16: Some(true),
            tuning: Some(Tuning::Lora),
            gradient_checkpointing: Some(true),
            reentrant: Some(false),
            input_grads: Some(false),
            accumulation: Some(4),
            token_level_loss: Some(true),
            loss_over_window: Some(true),
            warmup_ratio: Some(0.03),
            warmup_steps: None,
            total_steps: Some(1000),
            decay: Some(DecayShape::Cosine),
            peak_lr: Some(2e-4),
            per_device_batch: Some(8),
            devices: Some(1),
            checkpoint_every: Some(Cadence::Steps(50)),
            eval_split: Some(true),
            holdout: Some(true),
        }
    }

    /// The kinds `facts` gives.
    fn kinds(facts: &JobFacts) -> Vec<FindingKind> {
        check(facts).into_iter().map(|f| f.kind).collect()
    }

    #[test]
    fn a_clean_job_and_an_unknown_one_give_nothing() {
        assert_eq!(check(&clean()), vec![]);
        assert_eq!(check(&JobFacts::default()), vec![]);
    }

    #[test]
    fn fp16_on_a_bf16_model_is_an_error_and_fp16_on_an_fp16_model_is_not() {
        let f = JobFacts {
            precision: Some(Precision::Fp16),
            ..clean()
        };
        let found = check(&f);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, FindingKind::Fp16OnBf16Model);
        assert_eq!(found[0].severity, Severity::Error);
        assert!(found[0].message.contains("bf16=True"), "{}", found[0].message);
        let fp16_model = JobFacts {
            model_dtype: Some(Precision::Fp16),
            ..f
        };
        assert_eq!(kinds(&fp16_model), vec![]);
    }

    #[test]
    fn bf16_where_it_is_not_native_is_a_warning_and_fp32_there_is_not() {
        let slow = JobFacts {
            native_bf16: Some(false),
            ..clean()
        };
        let found = check(&slow);
        assert_eq!(kinds(&slow), vec![FindingKind::Bf16NotNative]);
        assert_eq!(found[0].severity, Severity::Warning);
        assert!(
            found[0].message.contains("set bf16=False"),
            "{}",
            found[0].message
        );
        let lightning = JobFacts {
            source: Some(Source::Lightning),
            ..slow.clone()
        };
        assert!(check(&lightning)[0].message.contains("precision=\"32-true\""));
        let fp32 = JobFacts {
            precision: Some(Precision::Fp32),
            ..slow.clone()
        };
        assert_eq!(check(&fp32), vec![]);
        let unknown = JobFacts {
            native_bf16: None,
            ..slow
        };
        assert_eq!(check(&unknown), vec![]);
    }

    #[test]
    fn reentrant_checkpointing_of_adapters_is_an_error_without_input_grads_and_a_warning_with() {
        let f = JobFacts {
            reentrant: Some(true),
            ..clean()
        };
        assert_eq!(kinds(&f), vec![FindingKind::CheckpointingWithoutInputGrads]);
        let hooked = JobFacts {
            input_grads: Some(true),
            ..f.clone()
        };
        assert_eq!(kinds(&hooked), vec![FindingKind::ReentrantCheckpointingWithLora]);
        let unknown = JobFacts {
            input_grads: None,
            ..f.clone()
        };
        assert_eq!(kinds(&unknown), vec![FindingKind::ReentrantCheckpointingWithLora]);
        let full = JobFacts {
            tuning: Some(Tuning::Full),
            ..f.clone()
        };
        assert_eq!(kinds(&full), vec![]);
        let off = JobFacts {
            gradient_checkpointing: Some(false),
            ..f
        };
        assert_eq!(kinds(&off), vec![]);
    }

    #[test]
    fn an_unnormalised_token_loss_is_found_only_when_it_accumulates() {
        let f = JobFacts {
            loss_over_window: Some(false),
            ..clean()
        };
        assert_eq!(kinds(&f), vec![FindingKind::LossNotNormalised]);
        let one = JobFacts {
            accumulation: Some(1),
            per_device_batch: Some(32),
            ..f.clone()
        };
        assert_eq!(kinds(&one), vec![]);
        let per_sample = JobFacts {
            token_level_loss: Some(false),
            ..f
        };
        assert_eq!(kinds(&per_sample), vec![]);
    }

    #[test]
    fn warmup_is_judged_at_both_ends_of_two_to_five_percent() {
        for (share, found) in [
            (0.0, true),
            (0.019, true),
            (0.02, false),
            (0.05, false),
            (0.051, true),
            (0.1, true),
        ] {
            let f = JobFacts {
                warmup_ratio: Some(share),
                ..clean()
            };
            let want = if found {
                vec![FindingKind::WarmupOutsideRange]
            } else {
                vec![]
            };
            assert_eq!(kinds(&f), want, "warmup {share}");
        }
        let steps = JobFacts {
            warmup_ratio: None,
            warmup_steps: Some(100),
            ..clean()
        };
        let found = check(&steps);
        assert_eq!(found[0].kind, FindingKind::WarmupOutsideRange);
        assert!(
            found[0].message.contains("warmup_steps=30"),
            "{}",
            found[0].message
        );
        let unknown_total = JobFacts {
            total_steps: None,
            ..steps
        };
        assert_eq!(kinds(&unknown_total), vec![]);
    }

    #[test]
    fn linear_and_constant_decay_are_found_other_shapes_are_not() {
        for (decay, found) in [
            (DecayShape::Linear, true),
            (DecayShape::Constant, true),
            (DecayShape::Cosine, false),
            (DecayShape::Other, false),
        ] {
            let f = JobFacts {
                decay: Some(decay),
                ..clean()
            };
            assert_eq!(kinds(&f) == vec![FindingKind::DecayNotCosine], found, "{decay:?}");
        }
    }

    #[test]
    fn the_seed_articles_lora_job_is_one_error_in_place_of_its_schedule_warnings() {
        let article = JobFacts {
            warmup_ratio: Some(0.1),
            decay: Some(DecayShape::Linear),
            peak_lr: Some(2e-4),
            ..clean()
        };
        let found = check(&article);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, FindingKind::SeedArticleFailure);
        assert_eq!(found[0].severity, Severity::Error);
        let full = JobFacts {
            tuning: Some(Tuning::Full),
            ..article.clone()
        };
        assert_eq!(
            kinds(&full),
            vec![FindingKind::WarmupOutsideRange, FindingKind::DecayNotCosine]
        );
        let low_lr = JobFacts {
            peak_lr: Some(5e-5),
            ..article
        };
        assert_eq!(
            kinds(&low_lr),
            vec![FindingKind::WarmupOutsideRange, FindingKind::DecayNotCosine]
        );
    }

    #[test]
    fn the_effective_batch_must_be_16_to_64_and_the_fix_lands_inside() {
        for (b, d, a, found) in [
            (8, 1, 1, true),
            (4, 2, 2, false),
            (16, 1, 1, false),
            (64, 1, 1, false),
            (65, 1, 1, true),
            (32, 4, 1, true),
            (3, 1, 1, true),
        ] {
            let f = JobFacts {
                per_device_batch: Some(b),
                devices: Some(d),
                accumulation: Some(a),
                ..clean()
            };
            let found_now = check(&f);
            assert_eq!(!found_now.is_empty(), found, "{b}×{d}×{a}: {found_now:?}");
            if let Some(x) = found_now.first() {
                let fixed: u64 = x
                    .message
                    .split("effective batch ")
                    .last()
                    .unwrap()
                    .trim_end_matches(").")
                    .parse()
                    .unwrap();
                assert!(EFFECTIVE_BATCH.contains(&fixed), "{}", x.message);
            }
        }
    }

    #[test]
    fn checkpoints_rarer_than_every_50_steps_or_none_are_found() {
        for (cadence, found) in [
            (Cadence::Steps(50), false),
            (Cadence::Steps(51), true),
            (Cadence::Steps(500), true),
            (Cadence::Never, true),
        ] {
            let f = JobFacts {
                checkpoint_every: Some(cadence),
                ..clean()
            };
            assert_eq!(
                kinds(&f) == vec![FindingKind::SparseCheckpoints],
                found,
                "{cadence:?}"
            );
        }
    }

    #[test]
    fn missing_validation_is_an_error_and_a_missing_holdout_a_warning() {
        let f = JobFacts {
            eval_split: Some(false),
            holdout: Some(false),
            ..clean()
        };
        let found = check(&f);
        let got: Vec<(FindingKind, Severity)> = found.iter().map(|f| (f.kind, f.severity)).collect();
        assert_eq!(
            got,
            vec![
                (FindingKind::NoEvalSplit, Severity::Error),
                (FindingKind::NoHoldout, Severity::Warning)
            ]
        );
    }

    #[test]
    fn the_default_recipe_is_within_the_rules_and_the_thresholds_are_its_defaults() {
        let recipe = Recipe::default();
        assert_eq!(check(&JobFacts::from_recipe(&recipe)), vec![]);
        assert_eq!(recipe.main.warmup, WARMUP_FIX);
        assert_eq!(recipe.run.checkpoint_every, CHECKPOINT_EVERY);
        assert_eq!(recipe.main.effective_batch() as u64, EFFECTIVE_BATCH_FIX);
    }

    #[test]
    fn facts_read_from_json_refuse_unknown_fields_and_findings_serialise_snake_case() {
        let f: JobFacts = serde_json::from_str(
            r#"{"source": "hf", "precision": "fp16", "model_dtype": "bf16", "checkpoint_every": {"Steps": 500}}"#,
        )
        .unwrap();
        assert_eq!(f.checkpoint_every, Some(Cadence::Steps(500)));
        let v = serde_json::to_value(check(&f)).unwrap();
        assert_eq!(v[0]["kind"], "fp16_on_bf16_model");
        assert_eq!(v[0]["severity"], "error");
        assert_eq!(v[1]["evidence"]["checkpoint_every"]["Steps"], 500);
        for f in check(&f) {
            assert_eq!(serde_json::to_value(f.kind).unwrap(), f.kind.as_str());
            assert_eq!(serde_json::to_value(f.severity).unwrap(), f.severity.as_str());
        }
        assert!(serde_json::from_str::<JobFacts>(r#"{"warmup": 0.1}"#).is_err());
        let never: JobFacts = serde_json::from_str(r#"{"checkpoint_every": "Never"}"#).unwrap();
        assert_eq!(kinds(&never), vec![FindingKind::SparseCheckpoints]);
    }
}
