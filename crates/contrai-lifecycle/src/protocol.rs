//! What an engine and the conductor say to each other. The engine reports [`Observation`]s; the
//! conductor answers with a [`Turn`]: [`Action`]s to carry out now, in order, and one [`Request`]
//! whose answer is the next observation. Every decision comes as an [`Action::Record`] before the
//! actions it causes, so the engine logs the evidence with what it does.

use std::collections::BTreeMap;

use contrai_recipe::Quantize;
use contrai_recipe::{Phase, PruneScope};
use contrai_run::{Decision, Measure, MetricsRow, QuantEval, QuarantineEntry, RunPlan};
use serde::{Deserialize, Serialize};

use crate::state::State;

/// The conductor's answer to an observation.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// Carry these out now, in order; none of them is answered.
    pub actions: Vec<Action>,
    /// Then do this and report what it gave.
    pub request: Request,
}

/// Something to do that needs no answer.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Action {
    /// Write this decision to `decisions.jsonl` and the console.
    Record(Decision),
    /// Train in this phase from now on (its metrics rows carry its name).
    SetPhase {
        /// The phase.
        phase: Phase,
        /// Whether the batch order starts afresh (a phase entered; not on resume).
        restart_order: bool,
    },
    /// Fold a LoRA job's adapters into the weights they adapt and train those from now on (see
    /// [`crate::contract::adapters_merged`]); nothing for a model without adapters or whose
    /// adapters are merged.
    MergeAdapters,
    /// Train on micro-batches of this many samples (per device).
    SetBatch(usize),
    /// Scale every dropout probability of the model by this factor (from the recipe's values).
    ScaleDropout(f64),
    /// Train without these training rows from now on (all rows dropped so far, sorted).
    DropSamples {
        /// Row indices into the train partition.
        rows: Vec<usize>,
    },
    /// The plan as the run now stands (a phase was entered, or the run began): write `plan.json`.
    Replan(Box<RunPlan>),
    /// Append this entry to `quarantine.jsonl`, with the sample ids of its rows where the engine
    /// knows them (a spike's batch, taken out by spike triage).
    Quarantine(QuarantineEntry),
    /// Never train these batches again (all skipped so far): when the step of one draws its rows
    /// again — a replay after a rollback — the engine draws the next batch in its order instead.
    SkipBatches {
        /// The batches.
        batches: Vec<SkippedBatch>,
    },
    /// Write a checkpoint of this step holding this state; keep the newest `run.keep_last` and
    /// these steps' checkpoints, delete the rest.
    Checkpoint {
        /// The conductor's state, to be given back by [`Observation::Restored`].
        state: Box<State>,
        /// Steps whose checkpoints must be kept (the best ones).
        keep: Vec<u64>,
    },
}

/// Something to do and report on.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Overfit one batch of the fresh model's copy (dropout off) and evaluate the fresh model;
    /// answered by [`Observation::PipelineChecked`].
    CheckPipeline {
        /// Optimizer steps on the batch.
        steps: u64,
        /// Samples in the batch.
        batch: usize,
        /// Constant LR of the check.
        lr: f64,
    },
    /// Write a checkpoint of the fresh model to scratch, read it back and compare outputs;
    /// answered by [`Observation::RoundTripped`].
    RoundTrip,
    /// One optimizer step; answered by [`Observation::Stepped`].
    Train(StepPlan),
    /// Evaluate on validation; answered by [`Observation::Evaluated`].
    Evaluate {
        /// Write an evaluation row in this phase (`None`: a measurement only).
        record: Option<Phase>,
    },
    /// Restore a checkpoint; answered by [`Observation::Restored`].
    Restore {
        /// Which checkpoint.
        to: RestorePoint,
        /// What comes back with it.
        scope: RestoreScope,
    },
    /// Set the pruning masks of these weight matrices and apply them after every optimizer step
    /// from now on; answered by [`Observation::Pruned`].
    Prune(PruneOrder),
    /// The loss of every training sample under the current model (no dropout), in row order;
    /// answered by [`Observation::SampleLosses`].
    MeasureSampleLosses,
    /// Prune each module alone, on a copy, to each level and evaluate; answered by
    /// [`Observation::Sensitivity`].
    MeasureSensitivity {
        /// The modules.
        modules: Vec<String>,
        /// Shares of each module's weights to zero.
        levels: Vec<f64>,
        /// Prune attention by whole heads of this many (None: single weights).
        heads: Option<usize>,
        /// Prune feed-forward layers by whole units.
        #[serde(default)]
        units: bool,
        /// Evaluate on this many validation samples, evenly spread over the set (an engine that
        /// evaluates whole batches takes evenly spread batches holding about as many), the
        /// unpruned model first; None (or more than the set holds): all of them.
        #[serde(default)]
        samples: Option<usize>,
        /// Stop a module's levels after the first whose loss is more than this share above the
        /// unpruned loss on the same samples (None: every level).
        #[serde(default)]
        stop_above: Option<f64>,
        /// Estimate every level instead of evaluating pruned copies
        /// ([`crate::sensitivity::Scan::Linearized`]): each sample's logits moved by the
        /// gradients of their margins times the weights a level removes, the cross-entropy of
        /// the moved logits averaged (`stop_above` does not apply: all levels come at once).
        #[serde(default)]
        linearized: bool,
    },
    /// Prune all these modules at once, on a copy, and evaluate; answered by
    /// [`Observation::JointLoss`].
    MeasureJoint {
        /// Each module's sparsity.
        sparsity: BTreeMap<String, f64>,
        /// Prune attention by whole heads of this many (None: single weights).
        heads: Option<usize>,
        /// Prune feed-forward layers by whole units.
        #[serde(default)]
        units: bool,
        /// Evaluate on this many validation samples, evenly spread, as `MeasureSensitivity` does
        /// (None: all of them).
        #[serde(default)]
        samples: Option<usize>,
    },
    /// Write the final weights (masks applied), the tokenizer or scaler and the classes, and
    /// evaluate them on validation; answered by [`Observation::Exported`].
    Export,
    /// Distil the final model into the recipe's student on the kept training rows; answered by
    /// [`Observation::Distilled`] (or [`Observation::Declined`]).
    Distil,
    /// Quantize the final model's weights (one variant of `refine.quantize`) and evaluate it on
    /// validation; answered by [`Observation::Quantized`] (or [`Observation::Declined`]).
    Quantize {
        /// The variant.
        to: Quantize,
        /// Weights a scale (None: the engine's choice — one scale a matrix, or the largest
        /// group that fits).
        block: Option<u8>,
    },
    /// Read the holdout — once — and evaluate every exported model on it; keep each quantized
    /// model's files when its verdict says so; write the model card; answered by
    /// [`Observation::HoldoutRead`].
    ReadHoldout {
        /// The quantized variants' verdicts, in the order they were made.
        quantized: Vec<QuantVerdict>,
    },
    /// The run is over: write `final/eval.json` from this summary.
    Finish(Box<Summary>),
    /// The run cannot go on (the decision that says why was recorded).
    Fail(Failure),
}

/// A batch that spiked, skipped when its step draws it again.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedBatch {
    /// The step that drew it (1-based, as `metrics.jsonl` numbers steps).
    pub step: u64,
    /// Its training rows, sorted (empty: whatever that step draws).
    pub rows: Vec<u64>,
}

/// One optimizer step's settings.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepPlan {
    /// Steps done before this one (this step is `step + 1`).
    pub step: u64,
    /// Its phase.
    pub phase: Phase,
    /// Its learning rate.
    pub lr: f64,
}

/// Which checkpoint a restore reads.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestorePoint {
    /// The newest checkpoint that passes its sums.
    Latest,
    /// The checkpoint of this step.
    Step(u64),
    /// The newest checkpoint of a step below this one that passes its sums (the newest there
    /// is when none is below): a spike rollback passes over the checkpoint of the step whose
    /// update gave the weights that spiked.
    Before(u64),
}

/// What a restore brings back.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestoreScope {
    /// The model, optimizer and masks only; steps, data order and journals run on.
    Weights,
    /// Everything: also the data position, the counters, and the journals cut back to the
    /// checkpoint (the conductor adopts the checkpoint's state).
    Everything,
}

/// Pruning masks to set: a target for every weight matrix to prune, by parameter path.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PruneOrder {
    /// Parameter path → its module's target.
    pub targets: BTreeMap<String, Target>,
    /// One magnitude threshold a module, or one over all.
    pub scope: PruneScope,
    /// Prune attention by whole heads of this many (None: single weights).
    pub heads: Option<usize>,
    /// Prune feed-forward layers by whole units (a unit's expansion column and projection row).
    #[serde(default)]
    pub units: bool,
}

/// What pruning asks of one module: a sparsity, and the cap it may never pass.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// The share of the module's weights to zero now.
    pub sparsity: f64,
    /// The most it may ever lose (attention's single-weight cap, diagnose's measurement, a
    /// frozen module's current sparsity).
    pub cap: f64,
}

impl Target {
    /// A target with no cap.
    pub fn uncapped(sparsity: f64) -> Target {
        Target { sparsity, cap: 1.0 }
    }

    /// The share actually pruned: the sparsity within the cap.
    pub fn share(self) -> f64 {
        self.sparsity.min(self.cap).clamp(0.0, 1.0)
    }
}

/// Whether a quantized variant is kept, and what it cost.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QuantVerdict {
    /// The variant.
    pub variant: Quantize,
    /// Kept: it cost at most `refine.max_drop`.
    pub kept: bool,
    /// What it cost on validation (negative: gained), in `measure`.
    pub drop_points: f64,
    /// Accuracy points, or a language model's perplexity percent.
    pub measure: Measure,
}

/// A quantized variant's holdout figures.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QuantHoldout {
    /// The variant.
    pub variant: Quantize,
    /// Its mean holdout loss.
    pub loss: f32,
    /// Its holdout accuracy.
    pub accuracy: f32,
}

/// Why a run stops before its end.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Failure {
    /// The pipeline cannot learn (validate's check, or a checkpoint that does not round-trip).
    Validate(String),
    /// Non-finite losses or gradients, or loss spikes, after every allowed rollback.
    Diverged(String),
}

/// What the conductor knows at the end, for `final/eval.json`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Steps trained.
    pub step: u64,
    /// The best checkpoint's step and validation loss.
    pub best: Option<(u64, f32)>,
    /// The step at which main ended and why.
    pub main_end: Option<(u64, String)>,
    /// Steps the recipe planned for all phases.
    pub planned_steps: u64,
    /// The int8 model's evaluation, when one was made.
    pub int8: Option<QuantEval>,
    /// The int4 model's evaluation, when one was made.
    pub int4: Option<QuantEval>,
}

/// What an engine reports.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Observation {
    /// Validate's check: the batch's loss at its first and last step, the fresh model's
    /// validation loss.
    PipelineChecked {
        /// Loss of the first step.
        first_loss: f32,
        /// Loss of the last step.
        last_loss: f32,
        /// Validation loss of the fresh model.
        val_loss: f32,
        /// Trainable parameters to which no step of the check gave a non-zero gradient (an
        /// adapter on a path the loss does not reach, a detached head), by name.
        #[serde(default)]
        no_gradient: Vec<String>,
        /// The batch's loss at every step (what its noise is judged on; an engine that sends
        /// none is judged on the first and last).
        #[serde(default)]
        losses: Vec<f32>,
    },
    /// The checkpoint round trip.
    RoundTripped {
        /// Whether the model read back gave the same outputs.
        identical: bool,
        /// Bytes of the model record.
        model_bytes: usize,
        /// Bytes of the optimizer record.
        optimizer_bytes: usize,
    },
    /// An optimizer step finished (a non-finite loss or norm: it failed and was not applied).
    Stepped {
        /// Mean loss of the step's effective batch (`None`: not logged at this step, as a
        /// trainer that logs every N steps reports it).
        loss: Option<f32>,
        /// Global gradient norm before clipping (`None`: not logged at this step).
        grad_norm: Option<f32>,
        /// The LR it ran at.
        lr: f64,
        /// The training rows of the step's batch, in the engine's numbering (empty: the engine
        /// cannot tell; spike triage then cannot tell a data cause).
        #[serde(default)]
        rows: Vec<u64>,
        /// Mean tokens a sample of the step's batch (`None`: not text, or not known): a loss jump
        /// that follows batch length is benign.
        #[serde(default)]
        length: Option<f32>,
    },
    /// An evaluation on validation.
    Evaluated {
        /// Mean validation loss.
        val_loss: f32,
        /// Validation accuracy in [0, 1].
        val_accuracy: f32,
    },
    /// A checkpoint was restored.
    Restored {
        /// The conductor state the checkpoint holds.
        state: Box<State>,
        /// For [`RestoreScope::Everything`]: `metrics.jsonl`'s rows up to the checkpoint (the
        /// live doctor is rebuilt from them); empty otherwise.
        #[cfg_attr(
            feature = "schema",
            schemars(with = "Vec<serde_json::Map<String, serde_json::Value>>")
        )]
        history: Vec<MetricsRow>,
    },
    /// The masks were set: each masked module's sparsity.
    Pruned {
        /// Module → share of zeros.
        sparsity: BTreeMap<String, f64>,
    },
    /// Every training sample's loss, in row order, with the samples' ids.
    SampleLosses {
        /// Losses.
        losses: Vec<f32>,
        /// Ids, by row.
        ids: Vec<String>,
    },
    /// Validation loss of each module pruned alone to each level (in the order requested).
    Sensitivity {
        /// Module → validation loss at each level measured (the levels from the first, up to
        /// where `stop_above` stopped them).
        val_loss: BTreeMap<String, Vec<f32>>,
        /// The unpruned model's loss on the samples the levels were measured on (None: not
        /// measured; the levels were measured on the whole validation set, whose loss the last
        /// evaluation gave).
        #[serde(default)]
        base: Option<f32>,
    },
    /// Validation loss with all modules pruned at once.
    JointLoss {
        /// Validation loss.
        val_loss: f32,
    },
    /// The final model was written and evaluated.
    Exported {
        /// Validation loss.
        val_loss: f32,
        /// Validation accuracy.
        val_accuracy: f32,
    },
    /// The student was distilled.
    Distilled {
        /// Its parameters.
        parameters: usize,
        /// The teacher's parameters.
        teacher_parameters: usize,
        /// Its step of best validation loss.
        best_step: u64,
        /// Its best validation loss.
        val_loss: f32,
        /// Its validation accuracy there.
        val_accuracy: f32,
    },
    /// A quantized model was made and evaluated on validation.
    Quantized {
        /// Its validation loss.
        val_loss: f32,
        /// Its validation accuracy.
        val_accuracy: f32,
        /// Bytes of its record.
        bytes: u64,
        /// Bytes of the f32 record.
        dense_bytes: u64,
        /// How it was quantized, in words.
        scheme: String,
        /// Where it is kept when kept (relative to the run directory).
        file: String,
    },
    /// The engine cannot carry out the request (a student, an int8 model …): what it did
    /// instead. Recorded as an `engine_substitute` decision; the lifecycle goes on without it.
    Declined {
        /// What was asked.
        what: String,
        /// What the engine did instead.
        instead: String,
    },
    /// The holdout was read and every model evaluated on it.
    HoldoutRead {
        /// Mean holdout loss of the final model.
        loss: f32,
        /// Its holdout accuracy.
        accuracy: f32,
        /// Holdout samples.
        samples: usize,
        /// Each quantized model's holdout figures (those made).
        quantized: Vec<QuantHoldout>,
    },
}
