//! The conductor's state: everything it carries from step to step, saved in every checkpoint so
//! that a resumed run decides alike. (The live doctor is not in it: it is rebuilt from
//! `metrics.jsonl`, which the checkpoint cuts back to its own step.)

use std::collections::BTreeMap;

use contrai_recipe::Phase;
use contrai_run::DecisionKind;
use serde::{Deserialize, Serialize};

use crate::planner::Entered;

/// Version of the state's layout (checkpoints of another version are refused by the engine).
pub const STATE_VERSION: u32 = 1;

/// Where the conductor is within its phase.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    /// Steps are being trained.
    Training,
    /// The phase is over; the move to the next phase (and a rollback it asked for) is pending.
    Ended {
        /// Restore the best checkpoint first (weights only; see [`crate::rollback`]).
        restore_best: bool,
    },
    /// Every phase is over.
    Done,
}

/// The conductor's state.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Layout version ([`STATE_VERSION`]).
    pub version: u32,
    /// The current phase.
    pub phase: Phase,
    /// Where in it.
    pub stage: Stage,
    /// Optimizer steps done (validate's check included).
    pub step: u64,
    /// The LR of the last step.
    pub lr: f64,
    /// The latest validation loss, when one was measured.
    pub val_loss: Option<f32>,
    /// The step and validation loss of the best checkpoint so far.
    pub best: Option<(u64, f32)>,
    /// The current phase's steps and LR.
    pub segment: Segment,
    /// Multiplier on every scheduled LR, lowered by non-finite rollbacks and plateau cuts.
    pub lr_scale: f64,
    /// Non-finite rollbacks so far.
    pub nan_retries: u32,
    /// Step of the last plateau cut (the plateau watch restarts there).
    pub last_cut: Option<u64>,
    /// The stability rule's memory of main's checkpoints.
    pub stability: Stability,
    /// The contraction's memory.
    pub contraction: Contraction,
    /// Sparsity of each masked module (as the engine last reported it).
    pub sparsity: BTreeMap<String, f64>,
    /// Step at which main ended and why.
    pub main_end: Option<(u64, DecisionKind)>,
    /// The phases entered so far (for `plan.json`'s re-plan).
    pub entered: Vec<Entered>,
    /// The recent finite training losses the spike rule judges against (restored with a
    /// checkpoint).
    #[serde(default)]
    pub spike_window: crate::spike_triage::Window,
    /// Spike triage's memory (kept through rollbacks).
    #[serde(default)]
    pub triage: crate::spike_triage::Triage,
}

/// The current phase's span and LR.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// Global step at which the phase started.
    pub start: u64,
    /// Steps the phase may take.
    pub steps: u64,
    /// The (unscaled) LR the phase entered with (contract and refine anneal from it).
    pub lr0: f64,
}

impl Segment {
    /// The global step at which the phase's steps are all done.
    pub fn end(&self) -> u64 {
        self.start + self.steps
    }
}

/// What the main-phase stability rule remembers of its checkpoints.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stability {
    /// Validation loss at the previous main checkpoint.
    pub prev_val: Option<f32>,
    /// Stable checkpoints in a row.
    pub stable_run: u32,
    /// Whether main was ever stable between two checkpoints.
    pub stabilised: bool,
    /// The best validation loss at a main checkpoint.
    pub best_val: Option<f32>,
    /// Main checkpoints in a row that beat the best by more than `stable_delta` (still learning).
    pub improving_run: u32,
}

/// What the contraction remembers.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Contraction {
    /// Contract evaluations in a row beyond tolerance.
    pub worse_run: u32,
    /// The best validation loss since the phase began (its entry value first) and its step, whose
    /// checkpoint a contraction rollback restores.
    pub best: Option<(u64, f32)>,
    /// Train rows dropped as the noisiest, sorted.
    pub dropped: Vec<usize>,
    /// Whether the noisiest samples were looked for (possibly none was dropped).
    pub noisy_checked: bool,
    /// Sparsity caps per module measured by `diagnose`.
    pub caps: BTreeMap<String, f64>,
    /// Modules whose pruning stopped (train/val divergence).
    pub frozen: Vec<String>,
    /// The validation − training loss gap at contraction's first evaluation.
    pub gap0: Option<f64>,
    /// Sum and count of training losses since the last evaluation.
    pub train_since_eval: (f64, u64),
    /// Sparsity per module at the last evaluation.
    pub sparsity_at_eval: BTreeMap<String, f64>,
}

impl State {
    /// The state of a run that has not started: its first phase, nothing trained.
    pub fn fresh(first: Phase) -> State {
        State {
            version: STATE_VERSION,
            phase: first,
            stage: Stage::Training,
            step: 0,
            lr: 0.0,
            val_loss: None,
            best: None,
            segment: Segment {
                start: 0,
                steps: 0,
                lr0: 0.0,
            },
            lr_scale: 1.0,
            nan_retries: 0,
            last_cut: None,
            stability: Stability::default(),
            contraction: Contraction::default(),
            sparsity: BTreeMap::new(),
            main_end: None,
            entered: Vec::new(),
            spike_window: crate::spike_triage::Window::default(),
            triage: crate::spike_triage::Triage::default(),
        }
    }

    /// The multiplier on every scheduled LR: the run's scale times spike triage's cuts.
    pub fn lr_multiplier(&self) -> f64 {
        self.lr_scale * self.triage.lr_factor
    }

    /// Every training row out of training, sorted: the noisiest dropped, and those that left
    /// for spiking.
    pub fn dropped_rows(&self) -> Vec<usize> {
        let mut rows: Vec<usize> = self
            .contraction
            .dropped
            .iter()
            .chain(&self.triage.left)
            .copied()
            .collect();
        rows.sort_unstable();
        rows.dedup();
        rows
    }

    /// Steps done in the current phase.
    pub fn k(&self) -> u64 {
        self.step - self.segment.start
    }
}
