//! The conductor: the whole lifecycle policy as a state machine an engine drives with
//! observations. It holds no tensor; the Burn engine and the PyTorch callbacks are two executors
//! of its decisions.
//!
//! The flow of one training step, in the order its rules apply:
//! step → spike triage ([`crate::spike_triage`]) → live doctor (main) → evaluation when due → divergence
//! and contraction guard (contract) → pruning update when due (contract) → stability rule at
//! main's checkpoints → the phase's end, if any, recorded → checkpoint when due → next step, or the
//! move to the next phase ([`crate::transitions`]). Rollbacks are in [`crate::rollback`], the LR in
//! [`crate::lr_schedule`].

use contrai_recipe::{Phase, Recipe};
use contrai_run::{MetricsRow, RunPlan};

use crate::awaiting::{Await, End};
use crate::budget::{PhaseSteps, due, eval_every};
use crate::contract;
use crate::error::{ConductorError, Result};
use crate::live_doctor::{LiveDoctors, react};
use crate::lr_schedule::PhaseLr;
use crate::preflight::Tuning;
use crate::protocol::{Action, Observation, Request, StepPlan, Turn};
use crate::prune_policy::Prunable;
use crate::rollback::NonFinite;
use crate::state::{STATE_VERSION, Stage, State};
use crate::transitions::Checked;

/// What the conductor knows of the run before it starts.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunInfo {
    /// Samples in the train partition.
    pub train_samples: usize,
    /// Classes of the task.
    pub classes: usize,
    /// Paths of the model's weight matrices, in the model's order (the candidates for pruning).
    pub weights: Vec<String>,
    /// Attention heads a block, when the model has attention.
    pub heads: Option<usize>,
    /// The job's own optimizer-step budget (a PyTorch job's `max_steps`, or epochs × batches),
    /// when the recipe leaves `main.steps` to it: the plan is laid on it
    /// ([`crate::budget::main_for_job`]).
    #[serde(default)]
    pub job_steps: Option<u64>,
    /// Whether the job recomputes activations in its backward pass (a PyTorch job's gradient
    /// checkpointing, on by its own settings or turned on by the engine for the recipe's
    /// `model.gradient_checkpointing`), when the engine knows: the plan says what runs.
    #[serde(default)]
    pub gradient_checkpointing: Option<bool>,
    /// How the job trains (every weight, or adapters on a frozen base), when the engine knows:
    /// an adapter job's validate check runs at `validate.adapter_lr` and is held to
    /// `validate.adapter_min_fall`.
    #[serde(default)]
    pub tuning: Option<Tuning>,
    /// What the model predicts: a quantized variant of a language model is judged by its
    /// perplexity, a classifier's by its accuracy.
    #[serde(default)]
    pub task: Task,
}

/// What the model predicts.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// A class a sample.
    #[default]
    Classification,
    /// The next token at every position (a causal or masked language model).
    LanguageModel,
}

impl RunInfo {
    /// Whether the job trains adapters on a frozen base (LoRA and other PEFT methods).
    pub fn adapters(&self) -> bool {
        self.tuning.is_some_and(Tuning::adapters)
    }
}

/// The lifecycle of one run.
#[derive(Debug)]
pub struct Conductor {
    pub(crate) recipe: Recipe,
    pub(crate) info: RunInfo,
    pub(crate) steps: PhaseSteps,
    pub(crate) state: State,
    pub(crate) live: LiveDoctors,
    pub(crate) prunable: Prunable,
    pub(crate) awaiting: Await,
    pub(crate) pending: Option<End>,
}

impl Conductor {
    /// The conductor of a new run of `recipe`.
    pub fn new(recipe: Recipe, info: RunInfo) -> Conductor {
        let first = recipe.run.phases.first().copied().unwrap_or(Phase::Main);
        Conductor::with_state(recipe, info, State::fresh(first))
    }

    /// The conductor of a run resumed from a checkpoint's `state`, its live doctor rebuilt from
    /// `history` (`metrics.jsonl` up to that checkpoint).
    pub fn resume(recipe: Recipe, info: RunInfo, state: State, history: &[MetricsRow]) -> Result<Conductor> {
        if state.version != STATE_VERSION {
            return Err(ConductorError::Version {
                found: state.version,
                expected: STATE_VERSION,
            });
        }
        let mut c = Conductor::with_state(recipe, info, state);
        c.live.replay(history, c.state.last_cut);
        Ok(c)
    }

    fn with_state(mut recipe: Recipe, info: RunInfo, state: State) -> Conductor {
        if let Some(job) = info.job_steps {
            recipe.main.steps = crate::budget::main_for_job(&recipe, job);
        }
        if let Some(on) = info.gradient_checkpointing {
            recipe.model.gradient_checkpointing = on;
        }
        let steps = PhaseSteps::new(&recipe);
        let live = LiveDoctors::new(&recipe, steps.validate + steps.main, info.classes as u32);
        let prunable = Prunable::new(&recipe.contract.prune, &info.weights);
        Conductor {
            recipe,
            info,
            steps,
            state,
            live,
            prunable,
            awaiting: Await::Begin,
            pending: None,
        }
    }

    /// The state (what a checkpoint saves).
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The recipe in force.
    pub fn recipe(&self) -> &Recipe {
        &self.recipe
    }

    /// The steps each phase plans.
    pub fn phase_steps(&self) -> PhaseSteps {
        self.steps
    }

    /// `plan.json` as the run now stands: the phases entered as they were, the rest as planned.
    pub fn plan(&self) -> RunPlan {
        crate::planner::run_plan(&self.recipe, self.info.train_samples as u64, &self.state.entered)
    }

    /// The first turn: validate's check or main's start for a new run; for a resumed one, the
    /// phase's settings and the next step (or the move to the next phase).
    pub fn begin(&mut self) -> Result<Turn> {
        if !matches!(self.awaiting, Await::Begin) {
            return Err(ConductorError::Protocol("begin() was called twice".into()));
        }
        let s = &self.state;
        let fresh = s.step == 0 && s.segment.steps == 0;
        let mut out = vec![Action::Replan(Box::new(self.plan()))];
        if let Some(job) = self.info.job_steps.filter(|_| fresh) {
            out.push(Action::Record(crate::transitions::plan_from_job(
                job,
                &self.steps,
            )));
        }
        match (fresh, s.phase) {
            (true, Phase::Validate) => {
                let v = &self.recipe.validate;
                let request = Request::CheckPipeline {
                    steps: v.steps,
                    batch: v.batch,
                    lr: if self.info.adapters() { v.adapter_lr } else { v.lr },
                };
                Ok(self.ask(out, request, Await::Pipeline))
            }
            (true, _) => self.enter_main(out),
            (false, _) => {
                out.extend(self.settings(false));
                self.proceed(out)
            }
        }
    }

    /// The next turn, given what the engine observed for the last request.
    pub fn observe(&mut self, obs: Observation) -> Result<Turn> {
        let awaiting = std::mem::replace(&mut self.awaiting, Await::Over);
        match (awaiting, obs) {
            // An evaluation of the trained model that is not finite: the non-finite rule, wherever
            // the evaluation was asked (validate's check has its own verdict on it).
            (
                Await::StepEval | Await::Diagnose(_) | Await::Entering(_),
                Observation::Evaluated { val_loss, .. },
            ) if !val_loss.is_finite() => self.on_nonfinite(NonFinite::Eval { val_loss }),
            (
                Await::Pipeline,
                Observation::PipelineChecked {
                    first_loss,
                    last_loss,
                    val_loss,
                    no_gradient,
                    losses,
                },
            ) => self.on_pipeline(Checked {
                first: first_loss,
                last: last_loss,
                val_loss,
                no_gradient,
                losses,
            }),
            (
                Await::RoundTrip,
                Observation::RoundTripped {
                    identical,
                    model_bytes,
                    optimizer_bytes,
                },
            ) => self.on_round_trip(identical, model_bytes, optimizer_bytes),
            (
                Await::Step,
                Observation::Stepped {
                    loss,
                    grad_norm,
                    lr,
                    rows,
                    length,
                },
            ) => self.on_step(loss, grad_norm, lr, (rows, length)),
            (
                Await::StepEval,
                Observation::Evaluated {
                    val_loss,
                    val_accuracy,
                },
            ) => self.on_step_eval(val_loss, val_accuracy),
            (Await::Pruned { entering }, Observation::Pruned { sparsity }) => {
                self.state.sparsity = sparsity;
                let out = Vec::new();
                if entering {
                    self.checkpoint_and_train(out)
                } else {
                    self.at_checkpoint(out)
                }
            }
            (Await::BestRestored, Observation::Restored { state, .. }) => self.on_best_restored(*state),
            (
                Await::NonfiniteRestored {
                    lr_scale,
                    nan_retries,
                },
                Observation::Restored { state, history },
            ) => self.on_nonfinite_restored(*state, &history, lr_scale, nan_retries),
            (Await::SpikeRestored, Observation::Restored { state, history }) => {
                self.adopt(*state, &history);
                self.after_rollback()
            }
            (Await::Diagnose(step), obs) => self.on_diagnose(step, obs),
            (Await::Entering(e), obs) => self.on_entering(e, obs),
            (Await::Finish(step), obs) => self.on_finish(step, obs),
            (awaiting, obs) => Err(ConductorError::Protocol(format!(
                "{obs:?} does not answer what the conductor waited for ({awaiting:?})"
            ))),
        }
    }

    /// A turn that asks `request` and waits for `next`.
    pub(crate) fn ask(&mut self, actions: Vec<Action>, request: Request, next: Await) -> Turn {
        self.awaiting = next;
        Turn { actions, request }
    }

    /// The engine's settings for the current phase: its name, the adapters merged past main, its
    /// batch and dropout; on entering it (`restart_order`) the re-plan too, else (a resume, a
    /// rollback) the rows dropped and the batches skipped so far.
    pub(crate) fn settings(&self, restart_order: bool) -> Vec<Action> {
        let phase = self.state.phase;
        let (batch, dropout) = contract::phase_settings(phase, &self.recipe);
        let mut out = Vec::new();
        if restart_order {
            out.push(Action::Replan(Box::new(self.plan())));
        }
        out.push(Action::SetPhase { phase, restart_order });
        merge_adapters_in(phase, &mut out);
        out.extend([Action::SetBatch(batch), Action::ScaleDropout(dropout)]);
        let dropped = self.state.dropped_rows();
        if !restart_order && !dropped.is_empty() {
            out.push(Action::DropSamples { rows: dropped });
        }
        let skipped = self.state.triage.skipped();
        if !restart_order && !skipped.is_empty() {
            out.push(Action::SkipBatches { batches: skipped });
        }
        out
    }

    /// After a full rollback (a spike, a non-finite step): the phase's settings, and the restored
    /// step's checkpoint written again with the state that knows the rollback (retries spent, the
    /// LR cut, rows dropped, the triage's memory) — a resume from it continues as this run does —
    /// then the next step.
    pub(crate) fn after_rollback(&mut self) -> Result<Turn> {
        let mut out = self.settings(false);
        self.checkpoint(&mut out);
        self.proceed(out)
    }

    /// After a resume or a full restore: the move to the next phase if the last one ended, else
    /// the next step.
    pub(crate) fn proceed(&mut self, out: Vec<Action>) -> Result<Turn> {
        match self.state.stage {
            Stage::Ended { .. } => self.transition(out),
            Stage::Done => self.finish(out),
            Stage::Training => Ok(self.train(out)),
        }
    }

    /// Asks for the next optimizer step, at the phase's scheduled LR times the run's scale.
    pub(crate) fn train(&mut self, out: Vec<Action>) -> Turn {
        let s = &self.state;
        let lr =
            PhaseLr::new(s.phase, &self.recipe, s.segment.steps, s.segment.lr0).at(s.k()) * s.lr_multiplier();
        let plan = StepPlan {
            step: s.step,
            phase: s.phase,
            lr,
        };
        self.ask(out, Request::Train(plan), Await::Step)
    }

    /// Writes a checkpoint of this step (the best one updated first), then trains on.
    pub(crate) fn checkpoint_and_train(&mut self, mut out: Vec<Action>) -> Result<Turn> {
        self.checkpoint(&mut out);
        Ok(self.train(out))
    }

    /// A checkpoint of this step; the run's best is this step's when its validation loss is the
    /// lowest yet (validate's check aside).
    pub(crate) fn checkpoint(&mut self, out: &mut Vec<Action>) {
        let s = &mut self.state;
        if let Some(vl) = s.val_loss
            && s.best.is_none_or(|(_, b)| vl < b)
            && s.phase != Phase::Validate
        {
            s.best = Some((s.step, vl));
        }
        let keep = [s.best, s.contraction.best]
            .into_iter()
            .flatten()
            .map(|b| b.0)
            .collect();
        out.push(Action::Checkpoint {
            state: Box::new(s.clone()),
            keep,
        });
    }

    /// A finished optimizer step: spike triage, the live doctor, then the evaluation when due.
    fn on_step(
        &mut self,
        loss: Option<f32>,
        grad_norm: Option<f32>,
        lr: f64,
        (mut rows, length): (Vec<u64>, Option<f32>),
    ) -> Result<Turn> {
        let bad = |x: Option<f32>| x.is_some_and(|v| !v.is_finite());
        if bad(loss) || bad(grad_norm) {
            return self.on_nonfinite(NonFinite::Step { loss, grad_norm });
        }
        let mut out = Vec::new();
        if let Some(loss) = loss {
            rows.sort_unstable();
            rows.dedup();
            let step = self.state.step + 1;
            let seen = crate::spike_triage::StepSeen {
                step,
                loss,
                rows,
                length,
            };
            if let Some(turn) = self.triage(seen, &mut out) {
                return Ok(turn);
            }
        }
        let s = &mut self.state;
        s.step += 1;
        s.lr = lr;
        let (step, phase) = (s.step, s.phase);
        match phase {
            Phase::Main => {
                let since_cut = s.last_cut.is_none_or(|c| step > c);
                let seen = self.live.train(step, loss, lr, grad_norm, since_cut);
                self.react(seen, &mut out);
            }
            Phase::Contract => {
                if let Some(loss) = loss {
                    let t = &mut s.contraction.train_since_eval;
                    *t = (t.0 + f64::from(loss), t.1 + 1);
                }
            }
            _ => {}
        }
        let s = &self.state;
        if due(s.k(), eval_every(phase, &self.recipe), s.segment.steps) {
            let request = Request::Evaluate { record: Some(phase) };
            return Ok(self.ask(out, request, Await::StepEval));
        }
        self.after_eval(out)
    }

    /// A step's evaluation: the live doctor (main); the divergence rule and the contraction's
    /// guard (contract).
    fn on_step_eval(&mut self, val_loss: f32, val_accuracy: f32) -> Result<Turn> {
        let mut out = Vec::new();
        let s = &mut self.state;
        s.val_loss = Some(val_loss);
        let step = s.step;
        match s.phase {
            Phase::Main => {
                let seen = self.live.eval(step, val_loss, val_accuracy);
                if self.pending.is_none() {
                    self.react(seen, &mut out);
                }
            }
            Phase::Contract => {
                let r = &self.recipe;
                if let Some(d) = contract::divergence(&mut s.contraction, step, val_loss, &s.sparsity, r) {
                    out.push(Action::Record(d));
                }
                if self.pending.is_none() {
                    self.pending =
                        contract::guard(&mut s.contraction, step, val_loss, r).map(|decision| End {
                            decision,
                            restore_best: true,
                        });
                }
            }
            _ => {}
        }
        self.after_eval(out)
    }

    /// Acts on what the live doctor raised: records, a plateau cut, main's end at overfitting.
    fn react(&mut self, seen: crate::live_doctor::Seen, out: &mut Vec<Action>) {
        let step = self.state.step;
        let r = react(&mut self.state, &self.recipe, step, seen, &mut self.live);
        out.extend(r.records.into_iter().map(Action::Record));
        if self.pending.is_none()
            && let Some(decision) = r.end
        {
            self.pending = Some(End {
                decision,
                restore_best: true,
            });
        }
    }

    /// After the evaluation (or none): the pruning update when due, then the checkpoint.
    fn after_eval(&mut self, out: Vec<Action>) -> Result<Turn> {
        let s = &self.state;
        let (k, steps) = (s.k(), s.segment.steps);
        let c = &self.recipe.contract;
        if s.phase == Phase::Contract
            && k.is_multiple_of(c.prune_every)
            && k != steps
            && !self.prunable.is_empty()
        {
            let order = self.prune_order();
            return Ok(self.ask(out, Request::Prune(order), Await::Pruned { entering: false }));
        }
        self.at_checkpoint(out)
    }

    /// The failure of the run, the decision that says why recorded first.
    pub(crate) fn fail(
        &mut self,
        mut out: Vec<Action>,
        decision: Option<contrai_run::Decision>,
        failure: crate::Failure,
    ) -> Turn {
        out.extend(decision.map(Action::Record));
        self.ask(out, Request::Fail(failure), Await::Over)
    }
}

impl Conductor {
    /// The current phase starts at this step: `steps` steps, entered at LR `lr0`.
    pub(crate) fn start_segment(&mut self, steps: u64, lr0: f64) {
        let s = &mut self.state;
        s.stage = Stage::Training;
        s.segment = crate::state::Segment {
            start: s.step,
            steps,
            lr0,
        };
        s.entered.push(crate::planner::Entered {
            phase: s.phase,
            start: s.step,
            steps,
            lr0,
        });
    }

    /// Adopts a checkpoint's state (a full restore), the live doctor rebuilt from `history`; spike
    /// triage's memory is the run's, not the checkpoint's, and stays.
    pub(crate) fn adopt(&mut self, state: State, history: &[MetricsRow]) {
        let triage = std::mem::take(&mut self.state.triage);
        self.state = state;
        self.state.triage = triage;
        self.pending = None;
        self.live = LiveDoctors::new(
            &self.recipe,
            self.steps.validate + self.steps.main,
            self.info.classes as u32,
        );
        self.live.replay(history, self.state.last_cut);
    }

    /// A pruning update: every selected weight matrix's target at this point of contraction.
    pub(crate) fn prune_order(&self) -> crate::protocol::PruneOrder {
        self.prunable.order(&self.state, &self.recipe, self.prune_heads())
    }
}

/// [`Action::MergeAdapters`] where [`contract::adapters_merged`] says a phase needs them merged.
pub(crate) fn merge_adapters_in(phase: Phase, out: &mut Vec<Action>) {
    if contract::adapters_merged(phase) {
        out.push(Action::MergeAdapters);
    }
}
