//! What the conductor waits for between an observation and the next: the continuation of each
//! multi-step procedure (a step's end, entering a phase, diagnose, the end of the run). Nothing
//! here is checkpointed: a checkpoint is written only where none is pending but the next step or
//! the move to the next phase, which `State::stage` records.

use std::collections::BTreeMap;

use contrai_recipe::{Phase, Quantize};
use contrai_run::{Decision, Measure, QuantEval};

use crate::protocol::{QuantHoldout, QuantVerdict};
use crate::sensitivity::{Joint, Scan, Sensitivity};

/// A phase's end decided during a step, recorded once the step's rules have all run.
#[derive(Debug)]
pub struct End {
    /// The decision that ends it.
    pub decision: Decision,
    /// Whether the best checkpoint is restored first.
    pub restore_best: bool,
}

/// What the conductor waits for, and what it does with it.
#[derive(Debug)]
pub enum Await {
    /// Nothing asked yet: [`Conductor::begin`] comes first.
    Begin,
    /// Validate's check.
    Pipeline,
    /// The checkpoint round trip before main.
    RoundTrip,
    /// A training step.
    Step,
    /// The evaluation of a step.
    StepEval,
    /// The masks of a pruning update; then the step's checkpoint, or the entered phase's.
    Pruned {
        /// Whether the phase was just entered.
        entering: bool,
    },
    /// A restore of the best checkpoint (the phase ended with a rollback).
    BestRestored,
    /// A full restore after a non-finite step, with the LR scale and retries to keep.
    NonfiniteRestored {
        /// The lowered LR scale.
        lr_scale: f64,
        /// Retries so far, this one included.
        nan_retries: u32,
    },
    /// A full restore after a loss spike (the triage's memory is kept through it).
    SpikeRestored,
    /// Diagnose's steps.
    Diagnose(DiagnoseStep),
    /// Entering contract or refine.
    Entering(Entering),
    /// The final steps.
    Finish(FinishStep),
    /// The run is over.
    Over,
}

/// Entering contract or refine, across the requests it makes.
#[derive(Debug)]
pub struct Entering {
    /// The phase being entered.
    pub phase: Phase,
    /// The LR it enters with, unscaled.
    pub lr0: f64,
    /// Steps a rolled-back contraction left unspent (refine takes them).
    pub unspent: u64,
    /// What is awaited.
    pub step: EnterStep,
}

/// What entering waits for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EnterStep {
    /// The training samples' losses (the noisy-sample policy, once).
    SampleLosses,
    /// The entry evaluation (the phase's reference).
    Evaluation,
}

/// What diagnose waits for.
#[derive(Debug)]
pub enum DiagnoseStep {
    /// The unpruned model's evaluation, before a measured scan.
    Eval(Scan),
    /// Each module's sensitivity, against the unpruned validation loss.
    Sensitivity {
        /// The unpruned loss on the whole validation set (None: not evaluated, a linearized
        /// scan's own samples stand for it).
        base: Option<f32>,
        /// How the scan was asked to be taken.
        plan: Scan,
    },
    /// A joint check.
    Joint(Box<Search>),
}

/// The joint check's progress.
#[derive(Debug)]
pub struct Search {
    /// The unpruned validation loss.
    pub base: f32,
    /// The unpruned loss on the scan's samples.
    pub scan_base: f32,
    /// How the scan was taken, on how many samples (a linearized scan's joint checks use them).
    pub plan: Scan,
    /// Each module alone at each level.
    pub sens: BTreeMap<String, Vec<Sensitivity>>,
    /// Each module's cap from its own measurement.
    pub alone: BTreeMap<String, f64>,
    /// The caps under check.
    pub caps: BTreeMap<String, f64>,
    /// Every joint check so far.
    pub tried: Vec<Joint>,
}

/// What the end waits for.
#[derive(Debug)]
pub enum FinishStep {
    /// The final model's export and validation scores.
    Exported,
    /// The student.
    Distilled {
        /// The final model's validation scores.
        dense: Scores,
    },
    /// A quantized model.
    Quantized {
        /// The final model's validation scores.
        dense: Scores,
        /// The variant asked for.
        variant: Quantize,
        /// The variants made before it.
        made: Vec<QuantMade>,
    },
    /// The holdout's one read.
    Holdout {
        /// The quantized models made.
        made: Vec<QuantMade>,
    },
}

/// A model's validation loss and accuracy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scores {
    /// Mean validation loss.
    pub loss: f32,
    /// Validation accuracy.
    pub accuracy: f32,
}

/// A quantized model as measured before the holdout, and its verdict.
#[derive(Debug)]
pub struct QuantMade {
    /// Kept or refused, and what it cost.
    pub verdict: QuantVerdict,
    /// Its validation scores, and the final model's.
    pub val: (Scores, Scores),
    /// Bytes of its record, and of the f32 record.
    pub bytes: (u64, u64),
    /// How the engine quantized, in words.
    pub scheme: String,
    /// Where the engine keeps it when kept.
    pub file: String,
}

impl QuantMade {
    /// `final/eval.json`'s part, with the holdout figures of the one read (NaN when the engine
    /// gave none).
    pub fn eval(&self, holdout: Option<&QuantHoldout>) -> QuantEval {
        let (loss, accuracy) = holdout.map_or((f32::NAN, f32::NAN), |h| (h.loss, h.accuracy));
        let perplexity = |loss: f32| f64::from(loss).exp();
        let lm = self.verdict.measure == Measure::Perplexity;
        QuantEval {
            kept: self.verdict.kept,
            val_accuracy: self.val.0.accuracy,
            holdout_accuracy: accuracy,
            drop_points: self.verdict.drop_points,
            measure: self.verdict.measure,
            val_perplexity: lm.then(|| (perplexity(self.val.0.loss), perplexity(self.val.1.loss))),
            holdout_perplexity: lm.then(|| perplexity(loss)),
            bytes: self.bytes.0,
            dense_bytes: self.bytes.1,
        }
    }
}
