//! `plan.json`: the lifecycle's programme — each phase's steps, batch, LR segments and dropout,
//! the cadence, the model's size and advice — as planned before the compute and re-planned as
//! phases are entered (the conductor in `contrai-lifecycle` computes it).

use contrai_recipe::Phase;
use serde::{Deserialize, Serialize};

/// The shape of one piece of the LR schedule.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::Display)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum LrShape {
    /// Linear rise to the peak.
    Warmup,
    /// Half a cosine down to the floor.
    Cosine,
    /// A straight line.
    Linear,
    /// Flat.
    Constant,
}

/// One straight or curved piece of the learning-rate schedule.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LrSegment {
    /// First step (global numbering).
    pub from_step: u64,
    /// Last step.
    pub to_step: u64,
    /// Its shape.
    pub shape: LrShape,
    /// LR at the first step.
    pub lr_start: f64,
    /// LR at the last step.
    pub lr_end: f64,
}

/// One phase of the lifecycle.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhasePlan {
    /// The phase.
    pub name: Phase,
    /// What happens in it.
    pub purpose: String,
    /// First global step.
    pub start_step: u64,
    /// Optimizer steps.
    pub steps: u64,
    /// Samples an optimizer step (effective batch).
    pub batch: u64,
    /// Samples seen.
    pub samples: u64,
    /// The LR schedule.
    pub lr: Vec<LrSegment>,
    /// Dropout multiplier.
    pub dropout_scale: f64,
    /// Whether the phase has started (its start, steps and LR are the run's, not the plan's).
    #[serde(default)]
    pub entered: bool,
}

/// The whole plan.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Phases in order.
    pub phases: Vec<PhasePlan>,
    /// Optimizer steps of main + contract + refine.
    pub total_steps: u64,
    /// Contract's share of those.
    pub contract_share: f64,
    /// Evaluate every this many steps.
    pub eval_every: u64,
    /// Checkpoint every this many steps.
    pub checkpoint_every: u64,
    /// Trainable parameters of the model (2 classes assumed when unknown).
    pub parameters: u64,
    /// Whether each block's activations are recomputed in the backward pass instead of kept
    /// (`model.gradient_checkpointing`): less memory, one more forward pass a step.
    #[serde(default)]
    pub gradient_checkpointing: bool,
    /// Advice from the rules of practice.
    pub advice: Vec<String>,
}

/// What `plan.json` holds: the plan, and what the engine running it adds.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPlan {
    /// The lifecycle plan.
    #[serde(flatten)]
    pub plan: Plan,
    /// Phases this run goes through.
    pub trained_phases: Vec<Phase>,
    /// Steps at which checkpoints are planned (main's start and end included; main may end early,
    /// which moves contract and refine forward).
    pub checkpoint_steps: Vec<u64>,
    /// Checkpoints kept besides the best.
    pub keep_last: u32,
}
