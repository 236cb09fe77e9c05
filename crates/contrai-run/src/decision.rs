//! `decisions.jsonl`: what the conductor decided, at which step, why, and the numbers behind it.

use contrai_recipe::Phase;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One decision: a line of `decisions.jsonl` and of the console.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Global step at which it was taken.
    pub step: u64,
    /// Phase it was taken in.
    pub phase: Phase,
    /// What was decided.
    pub kind: DecisionKind,
    /// Why, in words.
    pub reason: String,
    /// The numbers behind it.
    pub evidence: Value,
}

impl Decision {
    /// A decision with its evidence.
    pub fn new(
        step: u64,
        phase: Phase,
        kind: DecisionKind,
        reason: impl Into<String>,
        evidence: Value,
    ) -> Self {
        Decision {
            step,
            phase,
            kind,
            reason: reason.into(),
            evidence,
        }
    }

    /// Whether it sent the weights back to a checkpoint (a rollback of any kind).
    pub fn is_rollback(&self) -> bool {
        matches!(
            self.kind,
            DecisionKind::RollbackNonfinite
                | DecisionKind::RollbackContract
                | DecisionKind::EndMainOverfitting
                | DecisionKind::RollbackSpike
                | DecisionKind::DropSpiking
                | DecisionKind::LrCutSpike
        )
    }
}

/// Every kind of decision, as `decisions.jsonl` spells it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::AsRefStr,
    strum::Display,
    strum::EnumIter,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum DecisionKind {
    /// The pipeline overfitted one batch: main may start.
    ValidatePassed,
    /// The pipeline could not overfit one batch: the run stops before main.
    ValidateFailed,
    /// A checkpoint of the fresh model was written, verified and read back identically.
    CheckpointRoundTrip,
    /// The plan laid on the job's own step budget (a PyTorch job's `max_steps`), the phases at
    /// their shares: the recipe left `main.steps` to the job.
    PlanFromJob,
    /// The training loss plateaued: the LR was cut.
    LrCutPlateau,
    /// A live doctor finding, recorded (no action taken).
    DoctorFinding,
    /// Overfitting: main ended early and the best checkpoint was restored.
    EndMainOverfitting,
    /// Validation settled: main ended early to contract.
    MainStable,
    /// Main ran all its planned steps.
    MainComplete,
    /// At main's planned end, contraction starts although main never ended early.
    ForceContract,
    /// At main's planned end, contraction is skipped: main was still learning.
    SkipContract,
    /// A non-finite loss or gradient: back to the last checkpoint with a lower LR.
    RollbackNonfinite,
    /// A non-finite loss or gradient after every retry: the run stops.
    AbortNonfinite,
    /// A loss spike: back to the last checkpoint, its batch skipped and quarantined (cause not
    /// yet known).
    RollbackSpike,
    /// Samples that spiked before spiked again: back to the last checkpoint, they leave the
    /// training set (a data cause).
    DropSpiking,
    /// Other batches spiked after an earlier spike: back to the last checkpoint with the LR cut
    /// (an optimisation cause).
    LrCutSpike,
    /// Loss spikes after every retry: the run stops with the evidence.
    AbortSpike,
    /// A loss jump the batch's length explains (length-grouped batches): benign, no action (noted
    /// once).
    BenignSpike,
    /// The contraction hurt validation: back to its best checkpoint, contraction ends.
    RollbackContract,
    /// Train/val divergence grew: some modules stop being pruned.
    FreezePruning,
    /// The noisiest training samples were dropped for contract and refine.
    DropNoisiest,
    /// Contraction starts.
    EnterContract,
    /// The final anneal starts.
    EnterRefine,
    /// The doctor's reading of main, in `diagnose`.
    Doctor,
    /// Per-module pruning sensitivity and the sparsity caps, in `diagnose`.
    Sensitivity,
    /// The int8 model was kept.
    Int8,
    /// The int8 model cost too much accuracy and was refused.
    RefuseInt8,
    /// The int4 model was kept.
    Int4,
    /// The int4 model cost too much and was refused.
    RefuseInt4,
    /// A student was distilled from the refined model.
    Distill,
    /// The holdout was read, once.
    Holdout,
    /// An engine could not carry out what the conductor decided as asked; the reason says what
    /// it did instead (an engine never skips a decision silently).
    EngineSubstitute,
}

impl DecisionKind {
    /// The entering decision of `phase` (contract or refine).
    pub fn enter(phase: Phase) -> Option<DecisionKind> {
        match phase {
            Phase::Contract => Some(DecisionKind::EnterContract),
            Phase::Refine => Some(DecisionKind::EnterRefine),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_round_trips_with_the_spelling_of_the_format() {
        let d = Decision::new(
            80,
            Phase::Contract,
            DecisionKind::RollbackContract,
            "worse",
            serde_json::json!({"best_step": 60}),
        );
        let line = serde_json::to_string(&d).unwrap();
        assert_eq!(
            line,
            r#"{"step":80,"phase":"contract","kind":"rollback_contract","reason":"worse","evidence":{"best_step":60}}"#
        );
        assert_eq!(serde_json::from_str::<Decision>(&line).unwrap(), d);
        assert_eq!(DecisionKind::EnterRefine.to_string(), "enter_refine");
        assert!(d.is_rollback());
    }

    #[test]
    fn serde_and_display_spell_every_kind_alike() {
        use strum::IntoEnumIterator;
        for k in DecisionKind::iter() {
            let json = serde_json::to_value(k).unwrap();
            assert_eq!(json, serde_json::Value::String(k.to_string()));
            assert_eq!(k.as_ref().parse::<DecisionKind>().unwrap(), k);
        }
    }
}
