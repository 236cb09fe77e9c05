//! Contrai's conductor: the training-contraction lifecycle (`../shared/DESIGN.md` §1) as one
//! engine-agnostic component, with no tensor in it.
//!
//! An engine — Contrai's Burn trainer, or the PyTorch callbacks of the Python package — reports
//! [`Observation`]s (a step's loss, gradient norm and LR; an evaluation; sensitivity
//! measurements; per-sample losses; a restored checkpoint) and carries out the [`Turn`] it gets
//! back: [`Action`]s, each decision recorded before what it causes, and one [`Request`] to answer.
//! The [`State`] goes into every checkpoint, so a resumed run decides alike.
//!
//! Where each rule lives:
//! - when each phase ends and what comes next — [`transitions`] (when contraction starts);
//! - what a rollback restores — [`rollback`]; what a loss spike makes it do — [`spike`];
//! - how a phase's LR runs — [`lr`]; steps and cadence — [`budget`]; the plan — [`plan`];
//! - the live doctor's use (plateau cut, overfitting end, findings) — [`watch`];
//! - the contraction's settings, noisy samples, guard and divergence rule — [`contract`];
//! - pruning's targets, schedule and caps — [`prune`]; diagnose's sensitivity caps —
//!   [`sensitivity`], measured by [`diagnose`];
//! - the end: the quantized variants' verdicts, student, the holdout read once — [`finish`];
//! - a job's configuration checked before step 1 — [`preflight`].

#![warn(missing_docs)]

pub mod awaiting;
pub mod budget;
pub mod conductor;
pub mod contract;
pub mod diagnose;
pub mod error;
pub mod finish;
pub mod live_doctor;
pub mod lr_schedule;
pub mod planner;
pub mod preflight;
pub mod protocol;
pub mod prune_policy;
pub mod record;
pub mod rollback;
pub mod select;
pub mod sensitivity;
pub mod spike_triage;
pub mod state;
pub mod transitions;

pub use budget::PhaseSteps;
pub use conductor::{Conductor, RunInfo, Task};
pub use error::{ConductorError, Result};
pub use protocol::{
    Action, Failure, Observation, PruneOrder, QuantHoldout, QuantVerdict, Request, RestorePoint,
    RestoreScope, SkippedBatch, StepPlan, Summary, Target, Turn,
};
pub use record::{CheckpointRecord, RECORD_FORMAT};
pub use state::{STATE_VERSION, Stage, State};
