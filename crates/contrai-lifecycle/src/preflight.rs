//! The pre-flight check: a job's configuration read before step 1 against the lifecycle's rules
//! (`../shared/DESIGN.md` §1), for a recipe (`contrai check`), a Hugging Face or a Lightning job
//! (`contrai.preflight`, and the callbacks before their first step).
//!
//! | finding | when | severity | fix |
//! | --- | --- | --- | --- |
//! | `fp16_on_bf16_model` | fp16 training (autocast or fp16 weights) of a model whose config says bfloat16 | error | bf16 |
//! | `bf16_not_native` | bf16 training on a device that has no native bf16 matrix multiply (a CPU without AVX-512 or AMX, a GPU before Ampere): every matmul takes a slow fallback | warning | fp32 |
//! | `precision_not_applied` | the recipe asks bf16 (`model.precision`) of a PyTorch job that trains in another format: the job's own settings choose it | warning | the job's bf16 setting, or no `model.precision` |
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

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

mod facts;
pub use facts::{Cadence, DecayShape, JobFacts, Precision, Source, Tuning};

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
    /// The recipe's `model.precision` is not the format the job trains in.
    PrecisionNotApplied,
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
            FindingKind::PrecisionNotApplied => "precision_not_applied",
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
            | FindingKind::PrecisionNotApplied
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
        precision_not_applied(facts),
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

/// A recipe asking bf16 (`model.precision`, Contrai's own engine's setting) of a PyTorch job
/// that trains in another format: the job's own settings choose its format, so the recipe's
/// ask would pass unheeded.
fn precision_not_applied(f: &JobFacts) -> Option<Finding> {
    let (asked, trains) = (f.recipe_precision?, f.precision?);
    if f.source == Some(Source::Recipe) || asked != Precision::Bf16 || trains == asked {
        return None;
    }
    let fix = setting(
        f.source,
        "train in bf16",
        "set bf16=True in the job's TrainingArguments",
        "set precision=\"bf16-mixed\" on the Lightning Trainer",
        "train the job in bf16",
    );
    let trains = trains.as_str();
    Some(Finding::new(
        FindingKind::PrecisionNotApplied,
        format!(
            "the recipe's model.precision = \"bf16\" sets the format of Contrai's own engine, but this job trains in {trains} as its own settings choose: {fix}, or drop model.precision from the recipe."
        ),
        json!({"recipe_precision": "bf16", "precision": trains}),
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
mod tests;
