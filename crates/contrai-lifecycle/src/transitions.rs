//! When each phase ends and which comes next — where "when does contraction start?" is answered.
//!
//! | from | ends when | then |
//! | --- | --- | --- |
//! | validate | one batch's loss fell beyond its own noise (short of −`validate.min_fall` — an adapter job's, at `adapter_lr`: −`adapter_min_fall` — with a warning), an adapter job's every trainable parameter given a gradient, and a checkpoint round-tripped; a loss that rose, did not move, or is not finite stops the run ([`validated`]) | main |
//! | main | **stable**: the validation loss changed by < `contract.stable_delta` at `contract.stable_checkpoints` checkpoints in a row ([`stability`]); **overfitting** found by the live doctor ([`crate::live_doctor`]; the best checkpoint is restored); or its planned steps are done | diagnose, if the recipe runs it |
//! | diagnose | the doctor's reading and the sensitivity caps are recorded ([`crate::diagnose`]) | contract |
//! | main's planned end | contraction is **forced** unless main never stabilised and was still improving at each of the last `stable_checkpoints` checkpoints, when it is **skipped** ([`force_or_skip`]); an early end always contracts | contract, or refine |
//! | contract | its planned steps, or the guard rolls it back ([`crate::contract::guard`]; its unspent steps go to refine) | refine |
//! | refine | its steps | the final export and the holdout ([`crate::finish`]) |
//!
//! Entering contract or refine: the noisiest samples are looked for once ([`crate::contract::noisy`]),
//! the model is evaluated (the contraction's reference), the LR anneals from the entry LR
//! ([`crate::lr_schedule`]), batch and dropout change ([`crate::contract::phase_settings`]), contract's
//! pruning starts, and a checkpoint is written.

use contrai_recipe::{Phase, Recipe};
use contrai_run::{Decision, DecisionKind};
use serde_json::json;

use crate::awaiting::{Await, End, EnterStep, Entering};
use crate::budget::{PhaseSteps, checkpoint_every, due};
use crate::conductor::Conductor;
use crate::error::{ConductorError, Result};
use crate::protocol::{Action, Observation, Request, RestorePoint, RestoreScope, Turn};
use crate::state::{Segment, Stability, Stage, State};
use crate::{contract, rollback};

/// What validate's check reported (`Observation::PipelineChecked`).
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The batch's loss at the first step.
    pub first: f32,
    /// The batch's loss at the last step.
    pub last: f32,
    /// The fresh model's validation loss.
    pub val_loss: f32,
    /// Trainable parameters no step gave a gradient.
    pub no_gradient: Vec<String>,
    /// The batch's loss at every step (empty when the engine sent only the ends).
    pub losses: Vec<f32>,
}

/// Names listed in a decision's reason before "and N more".
const NAMES_SAID: usize = 5;
/// The smallest fall (or rise) of the batch's loss that counts, as a share of where it started:
/// a move smaller than this is no learning, however smooth.
const MIN_MOVE: f64 = 0.01;
/// How many of its own noise units the batch's loss must move by to have moved.
const NOISE_UNITS: f64 = 4.0;
/// Losses at each end of the check whose median is its level there.
const ENDS: usize = 3;

/// How the batch's loss moved: its level at the start and at the end (medians of the first and
/// last few steps), the relative fall, and the noise of one step's loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Movement {
    /// Level at the start.
    pub start: f64,
    /// Level at the end.
    pub end: f64,
    /// `1 − end / start`.
    pub fall: f64,
    /// One step's noise, relative to the start: the robust spread of the losses' second
    /// differences (a steady trend cancels out), as the sigma of one point.
    pub noise: f64,
    /// The move is larger than the noise and [`MIN_MOVE`].
    pub clear: bool,
}

impl Movement {
    /// The movement of a check's losses (or of its first and last, when that is all there is).
    pub fn of(c: &Checked) -> Movement {
        let losses: Vec<f64> = if c.losses.len() >= 2 * ENDS {
            c.losses.iter().map(|&l| f64::from(l)).collect()
        } else {
            vec![f64::from(c.first), f64::from(c.last)]
        };
        let ends = ENDS.min(losses.len() / 2).max(1);
        let level = |v: &[f64]| contrai_stats::median(v).unwrap_or(f64::NAN);
        let start = level(&losses[..ends]);
        let end = level(&losses[losses.len() - ends..]);
        let noise = contrai_stats::point_noise(&losses).unwrap_or(0.0) / start.abs().max(1e-12);
        let fall = 1.0 - end / start;
        // The difference of two medians of `ends` points carries about one point's noise.
        let clear = fall.abs() > MIN_MOVE.max(NOISE_UNITS * noise);
        Movement {
            start,
            end,
            fall,
            noise,
            clear,
        }
    }
}

/// Why the batch's loss shows a broken pipeline: not finite, not moved beyond its noise, or
/// risen; `None` when it fell clearly.
fn broken_loss(c: &Checked, m: &Movement, what: &str, batch: usize, went: &str) -> Option<String> {
    let finite = c.losses.iter().all(|l| l.is_finite()) && m.fall.is_finite() && c.val_loss.is_finite();
    if !finite {
        Some(format!(
            "the loss or the evaluation was not finite ({went}; val loss {})",
            c.val_loss
        ))
    } else if !m.clear {
        Some(format!(
            "{what} did not move the loss of one batch of {batch} beyond its own noise: {went}"
        ))
    } else if m.fall < 0.0 {
        Some(format!(
            "the loss of one batch of {batch} rose under {what}: {went}"
        ))
    } else {
        None
    }
}

/// The validate check's verdict. It refuses only a broken pipeline: an adapter job's trainable
/// parameter that no step gave a gradient; a loss or evaluation that is not finite; a batch
/// loss that rose, or did not move beyond its own noise (and [`MIN_MOVE`]). A loss that fell
/// clearly passes — past `validate.min_fall` (`adapter_min_fall` when the job trains adapters on
/// a frozen model, which cannot memorise a batch as a whole model can) as it should, short of it
/// with a warning naming the figures.
pub fn validated(step: u64, c: &Checked, adapters: bool, recipe: &Recipe) -> (bool, Decision) {
    let v = &recipe.validate;
    let (first, last, val_loss) = (c.first, c.last, c.val_loss);
    let (lr, min_fall) = match adapters {
        true => (v.adapter_lr, v.adapter_min_fall),
        false => (v.lr, v.min_fall),
    };
    let m = Movement::of(c);
    let evidence = json!({"first_loss": first, "last_loss": last, "fall": m.fall, "min_fall": min_fall,
                          "noise": m.noise, "batch": v.batch, "steps": v.steps, "lr": lr,
                          "val_loss": val_loss, "adapters": adapters, "no_gradient": c.no_gradient});
    let what = if adapters { "the adapters" } else { "the model" };
    let decision = |kind, reason| Decision::new(step, Phase::Validate, kind, reason, evidence.clone());
    let at = if adapters {
        format!(" at LR {lr:e}")
    } else {
        String::new()
    };
    let went = format!(
        "its loss went {first:.4} → {last:.4} (level {:.4} → {:.4}, {:+.1} %, one step's noise {:.2} %) in {} steps{at}",
        m.start,
        m.end,
        -100.0 * m.fall,
        100.0 * m.noise,
        v.steps
    );
    // A whole model may hold parameters its loss does not use (a BERT pooler under mean
    // pooling); an adapter job exists to train what it added, so each must get a gradient.
    let unreached = (adapters && !c.no_gradient.is_empty()).then(|| {
        let n = c.no_gradient.len();
        let mut names = c.no_gradient[..n.min(NAMES_SAID)].join(", ");
        if n > NAMES_SAID {
            names += &format!(" and {} more", n - NAMES_SAID);
        }
        (n, names)
    });
    // The loss first: a loss that never moved leaves every adapter without a gradient (a mask
    // that hides every label), and the labels are then what to check, not the targets.
    if let Some(why) = broken_loss(c, &m, what, v.batch, &went) {
        let none = unreached.map_or(String::new(), |(n, _)| {
            format!(" ({n} trainable parameter(s) received no gradient)")
        });
        let reason = format!(
            "{why}{none}; check the labels (shuffled, or all masked), that the model's weights train (not frozen, LR above 0) and the model before spending the main compute"
        );
        return (false, decision(DecisionKind::ValidateFailed, reason));
    }
    if let Some((n, names)) = unreached {
        let reason = format!(
            "{n} trainable parameter(s) received no gradient in validate's {} steps ({names}): the loss does not reach them, so they would never train; check which modules the adapters target and that nothing between them and the loss is detached",
            v.steps
        );
        return (false, decision(DecisionKind::ValidateFailed, reason));
    }
    let through = if adapters {
        format!(" through the adapters (LR {lr:e})")
    } else {
        String::new()
    };
    let reason = if m.fall > min_fall {
        format!(
            "overfitting one batch of {}{through} took its loss {first:.4} → {last:.4} (−{:.1} %) in {} steps; one evaluation ran (val loss {val_loss:.4}); main starts from the fresh model",
            v.batch,
            100.0 * m.fall,
            v.steps
        )
    } else {
        format!(
            "warning: one batch of {}{through} learned, short of the −{:.0} % a check expects: {went}; one evaluation ran (val loss {val_loss:.4}); main trains on — should its loss stay high, a higher LR, more adapter rank or targets, or a cleaner batch are what to try",
            v.batch,
            100.0 * min_fall
        )
    };
    (true, decision(DecisionKind::ValidatePassed, reason))
}

/// The plan laid on a job's own budget of `job` optimizer steps.
pub fn plan_from_job(job: u64, steps: &PhaseSteps) -> Decision {
    Decision::new(
        0,
        Phase::Validate,
        DecisionKind::PlanFromJob,
        format!(
            "the recipe leaves main.steps to the job: its {job} optimizer steps hold main {}, contract {} and refine {} (the recipe's shares; validate's {} one-batch steps are its own)",
            steps.main, steps.contract, steps.refine, steps.validate
        ),
        json!({"job_steps": job, "main": steps.main, "contract": steps.contract, "refine": steps.refine}),
    )
}

/// The checkpoint round trip before main passed.
pub fn round_trip(step: u64, model_bytes: usize, optimizer_bytes: usize) -> Decision {
    Decision::new(
        step,
        Phase::Validate,
        DecisionKind::CheckpointRoundTrip,
        format!(
            "a checkpoint of the fresh model ({model_bytes} + {optimizer_bytes} bytes) was written, verified against its SHA-256 sums and read back into a model with identical outputs"
        ),
        json!({"model_bytes": model_bytes, "optimizer_bytes": optimizer_bytes}),
    )
}

/// Relative change from `a` to `b`.
fn rel_change(a: f32, b: f32) -> f64 {
    (f64::from(b) - f64::from(a)).abs() / f64::from(a).abs().max(1e-12)
}

/// The main-phase stability rule at a checkpoint: main ends once the validation loss changed
/// by less than `contract.stable_delta` for `contract.stable_checkpoints` checkpoints in a row
/// (only when the recipe contracts afterwards).
pub fn stability(
    st: &mut Stability,
    step: u64,
    val: f32,
    main: Segment,
    recipe: &Recipe,
) -> Option<Decision> {
    let c = &recipe.contract;
    let improving = st
        .best_val
        .is_none_or(|b| f64::from(val) < f64::from(b) * (1.0 - c.stable_delta));
    st.improving_run = if improving { st.improving_run + 1 } else { 0 };
    st.best_val = Some(st.best_val.map_or(val, |b| b.min(val)));
    let prev = st.prev_val.replace(val)?;
    let change = rel_change(prev, val);
    if change < c.stable_delta {
        st.stable_run += 1;
        st.stabilised = true;
    } else {
        st.stable_run = 0;
    }
    if st.stable_run < c.stable_checkpoints || !recipe.run.has_phase(Phase::Contract) {
        return None;
    }
    let saved = main.end().saturating_sub(step);
    Some(Decision::new(
        step,
        Phase::Main,
        DecisionKind::MainStable,
        format!(
            "validation loss changed {:.2} % (< {:.0} %) over {} checkpoints in a row: main has converged; contracting now saves {saved} steps",
            100.0 * change,
            100.0 * c.stable_delta,
            st.stable_run
        ),
        json!({"val_loss": val, "previous_val_loss": prev, "relative_change": change,
               "stable_checkpoints": st.stable_run, "steps_saved": saved}),
    ))
}

/// Main ran all its planned steps: recorded as its end.
pub(crate) fn main_complete(state: &mut State) -> Decision {
    let steps = state.segment.steps;
    state.main_end = Some((state.step, DecisionKind::MainComplete));
    Decision::new(
        state.step,
        Phase::Main,
        DecisionKind::MainComplete,
        format!("main ran its {steps} planned steps"),
        json!({"steps": steps}),
    )
}

/// At main's planned end, when the stability rule never ended it: contraction is forced there
/// (the latest point that leaves its budget) unless main never stabilised — its validation loss
/// still beat its best by more than `stable_delta` at each of the last `stable_checkpoints`
/// checkpoints, so more main steps would still pay.
pub fn force_or_skip(st: &Stability, step: u64, recipe: &Recipe) -> (bool, Decision) {
    let c = &recipe.contract;
    let evidence = json!({"val_loss": st.prev_val, "best_val_loss": st.best_val,
                          "improving_checkpoints": st.improving_run, "stable_delta": c.stable_delta,
                          "ever_stable": st.stabilised});
    if st.stabilised || st.improving_run < c.stable_checkpoints {
        let why = if st.stabilised {
            "main was stable between checkpoints but not for long enough to end early".to_string()
        } else {
            format!(
                "the validation loss never held within {:.0} % between checkpoints (noise), but it stopped improving",
                100.0 * c.stable_delta
            )
        };
        let reason = format!("{why}: contraction is forced at the latest point that leaves its budget");
        let d = Decision::new(
            step,
            Phase::Contract,
            DecisionKind::ForceContract,
            reason,
            evidence,
        );
        return (true, d);
    }
    let reason = format!(
        "main never stabilised: its validation loss fell by more than {:.0} % at each of the last {} checkpoints; more main steps would pay, and contracting an unconverged model would lock in its errors",
        100.0 * c.stable_delta,
        st.improving_run
    );
    let d = Decision::new(
        step,
        Phase::Contract,
        DecisionKind::SkipContract,
        reason,
        evidence,
    );
    (false, d)
}

impl Conductor {
    /// Validate's check: pass and start main, or stop here.
    pub(crate) fn on_pipeline(&mut self, checked: Checked) -> Result<Turn> {
        self.state.step += self.recipe.validate.steps;
        let (passed, decision) = validated(self.state.step, &checked, self.info.adapters(), &self.recipe);
        if !passed {
            let reason = decision.reason.clone();
            return Ok(self.fail(Vec::new(), Some(decision), crate::Failure::Validate(reason)));
        }
        self.state.phase = Phase::Main;
        self.enter_main(vec![Action::Record(decision)])
    }

    /// Main starts: its schedule and settings; the checkpoint round trip (after validate); its
    /// first checkpoint.
    pub(crate) fn enter_main(&mut self, mut out: Vec<Action>) -> Result<Turn> {
        self.state.phase = Phase::Main;
        self.start_segment(self.steps.main, self.recipe.main.lr);
        out.extend(self.settings(true));
        if self.recipe.run.has_phase(Phase::Validate) {
            return Ok(self.ask(out, Request::RoundTrip, Await::RoundTrip));
        }
        self.checkpoint_and_train(out)
    }

    pub(crate) fn on_round_trip(
        &mut self,
        identical: bool,
        model_bytes: usize,
        optimizer_bytes: usize,
    ) -> Result<Turn> {
        if !identical {
            let why = "a checkpoint read back does not reproduce the model it saved".to_string();
            return Ok(self.fail(Vec::new(), None, crate::Failure::Validate(why)));
        }
        let d = round_trip(self.state.step, model_bytes, optimizer_bytes);
        self.checkpoint_and_train(vec![Action::Record(d)])
    }

    /// At the checkpoint cadence: main's stability rule; then a phase that ended says so before
    /// the checkpoint (which then holds the end), and the run moves on.
    pub(crate) fn at_checkpoint(&mut self, mut out: Vec<Action>) -> Result<Turn> {
        let s = &mut self.state;
        let (k, steps, phase) = (s.k(), s.segment.steps, s.phase);
        let checkpoint = due(k, checkpoint_every(phase, &self.recipe), steps);
        if checkpoint
            && phase == Phase::Main
            && self.pending.is_none()
            && self.recipe.guards.enabled
            && let Some(val) = s.val_loss
        {
            let stable = stability(&mut s.stability, s.step, val, s.segment, &self.recipe);
            self.pending = stable.map(|decision| End {
                decision,
                restore_best: false,
            });
        }
        let ended = self.resolve_end(&mut out, k == steps);
        if checkpoint {
            self.checkpoint(&mut out);
        }
        if ended {
            self.transition(out)
        } else {
            Ok(self.train(out))
        }
    }

    /// Records the end of the phase, if the step ended it (a rule, or its last step).
    fn resolve_end(&mut self, out: &mut Vec<Action>, last: bool) -> bool {
        let s = &mut self.state;
        if let Some(end) = self.pending.take() {
            if s.phase == Phase::Main {
                s.main_end = Some((s.step, end.decision.kind));
            }
            out.push(Action::Record(end.decision));
            s.stage = Stage::Ended {
                restore_best: end.restore_best,
            };
            return true;
        }
        if !last {
            return false;
        }
        if s.phase == Phase::Main && s.main_end.is_none() {
            out.push(Action::Record(main_complete(s)));
        }
        s.stage = Stage::Ended { restore_best: false };
        true
    }

    /// The phase ended: restore the best checkpoint if its end asked for it, then move on.
    pub(crate) fn transition(&mut self, out: Vec<Action>) -> Result<Turn> {
        if let Stage::Ended { restore_best: true } = self.state.stage
            && let Some(best) = rollback::best_checkpoint(&self.state)
        {
            let request = Request::Restore {
                to: RestorePoint::Step(best),
                scope: RestoreScope::Weights,
            };
            return Ok(self.ask(out, request, Await::BestRestored));
        }
        self.leave(out)
    }

    /// Leaves the ended phase: diagnose after main, then the next phase.
    pub(crate) fn leave(&mut self, out: Vec<Action>) -> Result<Turn> {
        if self.state.phase == Phase::Main && self.recipe.run.has_phase(Phase::Diagnose) {
            return Ok(self.diagnose(out));
        }
        self.choose_next(out)
    }

    /// The next phase of the recipe after the one that ended (diagnose aside); contract only
    /// when [`Conductor::contract_allowed`].
    pub(crate) fn choose_next(&mut self, mut out: Vec<Action>) -> Result<Turn> {
        let done = self.state.phase;
        let later: Vec<Phase> = self
            .recipe
            .run
            .phases
            .iter()
            .copied()
            .filter(|p| *p > done)
            .collect();
        let mut next = later.into_iter().filter(|p| *p != Phase::Diagnose);
        let mut target = next.next();
        if target == Some(Phase::Contract) && !self.contract_allowed(&mut out) {
            target = next.next();
        }
        match target {
            Some(p) => Ok(self.enter(out, p)),
            None => {
                self.state.stage = Stage::Done;
                self.finish(out)
            }
        }
    }

    /// Whether contract runs: always after main ended early; at main's planned end as
    /// [`force_or_skip`] says (recorded); always when the guards are off.
    fn contract_allowed(&mut self, out: &mut Vec<Action>) -> bool {
        let ended_early = self
            .state
            .main_end
            .is_some_and(|(_, k)| k != DecisionKind::MainComplete);
        if ended_early || !self.recipe.guards.enabled {
            return true;
        }
        let (go, d) = force_or_skip(&self.state.stability, self.state.step, &self.recipe);
        out.push(Action::Record(d));
        go
    }

    /// Starts entering `phase`: the noisiest samples first (once), then the entry evaluation.
    fn enter(&mut self, out: Vec<Action>, phase: Phase) -> Turn {
        let s = &mut self.state;
        let lr0 = s.lr / s.lr_multiplier();
        let unspent = rollback::unspent(s);
        // The phase that ends keeps its steps as run, for the re-plan.
        if let Some(e) = s.entered.last_mut() {
            e.steps = s.step - e.start;
        }
        s.phase = phase;
        let c = &self.recipe.contract;
        let step = if !s.contraction.noisy_checked && c.drop_noisiest > 0.0 {
            EnterStep::SampleLosses
        } else {
            EnterStep::Evaluation
        };
        let e = Entering {
            phase,
            lr0,
            unspent,
            step,
        };
        self.entering(out, e)
    }

    fn entering(&mut self, out: Vec<Action>, e: Entering) -> Turn {
        let request = match e.step {
            EnterStep::SampleLosses => Request::MeasureSampleLosses,
            // The validation loss of the very model this phase starts from: the contraction's
            // reference (after an overfitting rollback it is not main's last evaluation).
            EnterStep::Evaluation => Request::Evaluate { record: None },
        };
        self.ask(out, request, Await::Entering(e))
    }

    pub(crate) fn on_entering(&mut self, mut e: Entering, obs: Observation) -> Result<Turn> {
        match (e.step, obs) {
            (EnterStep::SampleLosses, Observation::SampleLosses { losses, ids }) => {
                let s = &mut self.state;
                let (dropped, d) = contract::noisy(&losses, &ids, s.step, s.phase, &self.recipe);
                s.contraction.dropped = dropped;
                s.contraction.noisy_checked = true;
                e.step = EnterStep::Evaluation;
                // The rows spike triage took out stay out too.
                let rows = s.dropped_rows();
                let out = vec![Action::Record(d), Action::DropSamples { rows }];
                Ok(self.entering(out, e))
            }
            (EnterStep::Evaluation, Observation::Evaluated { val_loss, .. }) => self.entered(e, val_loss),
            (_, obs) => Err(ConductorError::Protocol(format!(
                "{obs:?} does not answer entering {} ({:?})",
                e.phase, e.step
            ))),
        }
    }

    /// The phase starts: its span, LR and reference; its settings; the decision; contract's first
    /// pruning; a checkpoint.
    fn entered(&mut self, e: Entering, entry_val: f32) -> Result<Turn> {
        let steps = match e.phase {
            Phase::Contract => self.steps.contract,
            _ => self.steps.refine + e.unspent,
        };
        self.state.val_loss = Some(entry_val);
        self.start_segment(steps, e.lr0);
        let s = &mut self.state;
        s.contraction.worse_run = 0;
        s.contraction.best = Some((s.step, entry_val));
        let mut out = self.settings(true);
        let d = contract::entry_decision(&self.state, &self.recipe, self.info.train_samples, entry_val);
        out.push(Action::Record(d));
        if e.phase == Phase::Contract && !self.prunable.is_empty() {
            let order = self.prune_order();
            return Ok(self.ask(out, Request::Prune(order), Await::Pruned { entering: true }));
        }
        self.checkpoint_and_train(out)
    }
}

#[cfg(test)]
mod tests;
