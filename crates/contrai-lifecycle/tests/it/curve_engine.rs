//! The simulated engine the conductor's tests drive: it answers each request from curves (the
//! training and validation loss at a step in a phase) and keeps what a real engine keeps.

use std::collections::BTreeMap;

use contrai_lifecycle::{
    Action, Conductor, Observation, QuantHoldout, Request, RestorePoint, RestoreScope, RunInfo, State, Task,
};
use contrai_recipe::{Phase, Quantize, Recipe};
use contrai_run::{EvalRow, MetricsRow, TrainRow};
use contrai_testkit::engine::{Simulated, Transcript};

/// A curve of the simulated run: the value at a global step in a phase.
pub(crate) type Curve = Box<dyn Fn(u64, Phase) -> f32>;

/// A simulated engine: it answers the conductor's requests from curves and keeps what a real
/// engine keeps (steps, metrics rows, checkpoints).
pub(crate) struct Sim {
    pub(crate) step: u64,
    pub(crate) phase: Phase,
    pub(crate) train: Curve,
    pub(crate) val: Curve,
    /// Steps (1-based) whose loss is not finite, every time they are tried.
    pub(crate) nan_at: Vec<u64>,
    /// Steps whose first evaluation has a NaN loss (an overflow that a slower LR avoids).
    pub(crate) nan_eval_once: Vec<u64>,
    pub(crate) history: Vec<MetricsRow>,
    pub(crate) checkpoints: BTreeMap<u64, (State, usize)>,
    pub(crate) sparsity: BTreeMap<String, f64>,
    /// Every turn the conductor gave, and how the run ended.
    pub(crate) log: Transcript,
    /// The unpruned loss on the sensitivity scan's samples this engine reports (None: all of val).
    pub(crate) scan_base: Option<f32>,
    /// A quantized variant this engine cannot make (it declines it).
    pub(crate) declines: Option<Quantize>,
}

pub(crate) fn info() -> RunInfo {
    let weights = [
        "embed.weight",
        "blocks.0.attn.query.weight",
        "blocks.0.attn.key.weight",
        "blocks.0.attn.value.weight",
        "blocks.0.attn.output.weight",
        "blocks.0.ffn.up.weight",
        "blocks.0.ffn.down.weight",
        "head.weight",
    ];
    RunInfo {
        train_samples: 100,
        classes: 2,
        weights: weights.map(String::from).to_vec(),
        heads: Some(2),
        job_steps: None,
        gradient_checkpointing: None,
        tuning: None,
        task: Task::Classification,
    }
}

/// A small recipe: 3 validate steps, 100 main steps evaluated and checkpointed every 10, contract
/// evaluated every 5.
pub(crate) fn recipe() -> Recipe {
    let mut r = Recipe::default();
    r.validate.steps = 3;
    r.main.steps = 100;
    r.run.eval_every = 10;
    r.run.checkpoint_every = 10;
    r.contract.eval_every = 5;
    r.guards.overfit_patience = 30;
    r
}

impl Sim {
    pub(crate) fn new(train: Curve, val: Curve) -> Sim {
        Sim {
            step: 0,
            phase: Phase::Validate,
            train,
            val,
            nan_at: Vec::new(),
            nan_eval_once: Vec::new(),
            history: Vec::new(),
            checkpoints: BTreeMap::new(),
            sparsity: BTreeMap::new(),
            log: Transcript::default(),
            scan_base: None,
            declines: None,
        }
    }

    /// Runs `recipe` from its first turn.
    pub(crate) fn run_from_start(&mut self, recipe: Recipe) {
        self.run_with(recipe, info());
    }

    /// Runs `recipe` from its first turn on a run `info` describes.
    pub(crate) fn run_with(&mut self, recipe: Recipe, info: RunInfo) {
        let mut c = Conductor::new(recipe, info);
        let first = c.begin().unwrap();
        self.run(&mut c, first);
    }
}

impl Simulated for Sim {
    fn transcript(&mut self) -> &mut Transcript {
        &mut self.log
    }

    fn act(&mut self, a: &Action) {
        match a {
            Action::SetPhase { phase, .. } => self.phase = *phase,
            Action::Checkpoint { state, .. } => {
                assert_eq!(state.step, self.step, "a checkpoint of the engine's step");
                self.checkpoints
                    .insert(self.step, ((**state).clone(), self.history.len()));
            }
            _ => {}
        }
    }

    fn answer(&mut self, r: &Request) -> Observation {
        match r {
            Request::CheckPipeline { steps, .. } => {
                self.step += steps;
                Observation::PipelineChecked {
                    first_loss: 0.7,
                    last_loss: 0.01,
                    val_loss: 0.69,
                    no_gradient: Vec::new(),
                    losses: Vec::new(),
                }
            }
            Request::RoundTrip => Observation::RoundTripped {
                identical: true,
                model_bytes: 10,
                optimizer_bytes: 20,
            },
            Request::Train(plan) => {
                assert_eq!(plan.step, self.step);
                if self.nan_at.contains(&(plan.step + 1)) {
                    return Observation::Stepped {
                        loss: Some(f32::NAN),
                        grad_norm: Some(f32::NAN),
                        lr: plan.lr,
                        rows: Vec::new(),
                        length: None,
                    };
                }
                self.step += 1;
                let loss = (self.train)(self.step, plan.phase);
                self.history.push(MetricsRow::Train(TrainRow {
                    step: self.step,
                    phase: plan.phase,
                    samples: self.step * 32,
                    train_loss: loss,
                    lr: plan.lr,
                    grad_norm: 1.0,
                    batch_size: 32,
                    wall_s: 0.0,
                }));
                Observation::Stepped {
                    loss: Some(loss),
                    grad_norm: Some(1.0),
                    lr: plan.lr,
                    rows: Vec::new(),
                    length: None,
                }
            }
            Request::Evaluate { record } => {
                let mut val_loss = (self.val)(self.step, self.phase);
                if let Some(i) = self.nan_eval_once.iter().position(|s| *s == self.step) {
                    self.nan_eval_once.remove(i);
                    val_loss = f32::NAN;
                }
                if let Some(phase) = record {
                    self.history.push(MetricsRow::Eval(EvalRow {
                        step: self.step,
                        phase: *phase,
                        val_loss,
                        val_accuracy: 0.9,
                    }));
                }
                Observation::Evaluated {
                    val_loss,
                    val_accuracy: 0.9,
                }
            }
            Request::Restore { to, scope } => {
                let at = match to {
                    RestorePoint::Latest => *self.checkpoints.keys().last().unwrap(),
                    RestorePoint::Step(s) => *s,
                    RestorePoint::Before(s) => *self.checkpoints.range(..*s).next_back().unwrap().0,
                };
                let (state, rows) = self.checkpoints[&at].clone();
                let history = match scope {
                    RestoreScope::Everything => {
                        self.step = at;
                        self.history.truncate(rows);
                        self.checkpoints.retain(|s, _| *s <= at);
                        self.history.clone()
                    }
                    RestoreScope::Weights => Vec::new(),
                };
                self.sparsity = state.sparsity.clone();
                Observation::Restored {
                    state: Box::new(state),
                    history,
                }
            }
            Request::Prune(order) => {
                for (path, t) in &order.targets {
                    let module = contrai_lifecycle::prune_policy::module_of(path);
                    self.sparsity.insert(module, t.share());
                }
                Observation::Pruned {
                    sparsity: self.sparsity.clone(),
                }
            }
            Request::MeasureSampleLosses => Observation::SampleLosses {
                losses: (0..100).map(|i| if i < 3 { 2.0 } else { 0.05 }).collect(),
                ids: (0..100).map(|i| format!("s{i}")).collect(),
            },
            Request::MeasureSensitivity { modules, levels, .. } => Observation::Sensitivity {
                val_loss: modules
                    .iter()
                    .map(|m| (m.clone(), levels.iter().map(|l| 0.3 + 0.01 * *l as f32).collect()))
                    .collect(),
                base: self.scan_base,
            },
            Request::MeasureJoint { .. } => Observation::JointLoss { val_loss: 0.301 },
            Request::Export => Observation::Exported {
                val_loss: 0.3,
                val_accuracy: 0.9,
            },
            Request::Distil => Observation::Distilled {
                parameters: 10,
                teacher_parameters: 100,
                best_step: 5,
                val_loss: 0.35,
                val_accuracy: 0.88,
            },
            Request::Quantize { to, .. } if self.declines == Some(*to) => Observation::Declined {
                what: format!("quantize the final model to {to}"),
                instead: "this engine has no such codes".into(),
            },
            // int8 costs a little, int4 more (on the loss 0.3 the export reports).
            Request::Quantize { to, .. } => Observation::Quantized {
                val_loss: if *to == Quantize::Int4 { 0.4 } else { 0.303 },
                val_accuracy: 0.895,
                bytes: 25,
                dense_bytes: 100,
                scheme: "int8".into(),
                file: "final/model-int8.bpk".into(),
            },
            Request::ReadHoldout { quantized } => Observation::HoldoutRead {
                loss: 0.31,
                accuracy: 0.9,
                samples: 20,
                quantized: quantized
                    .iter()
                    .map(|v| QuantHoldout {
                        variant: v.variant,
                        loss: 0.32,
                        accuracy: 0.9,
                    })
                    .collect(),
            },
            Request::Finish(_) | Request::Fail(_) => unreachable!("handled by run"),
        }
    }
}

impl std::ops::Deref for Sim {
    type Target = Transcript;

    fn deref(&self) -> &Transcript {
        &self.log
    }
}

/// Runs `recipe` against the curves; returns the simulated engine after the run.
pub(crate) fn simulate(recipe: Recipe, train: Curve, val: Curve, nan_at: Vec<u64>) -> Sim {
    let mut sim = Sim::new(train, val);
    sim.nan_at = nan_at;
    sim.run_from_start(recipe);
    sim
}

/// A falling training loss.
pub(crate) fn falling() -> Curve {
    Box::new(|s, _| 0.7 * (-(s as f32) / 40.0).exp() + 0.05)
}

/// Validation that settles like [`settles`], then worsens 0.002 a step once contraction starts
/// (at step 63).
pub(crate) fn hurt_by_contraction() -> Curve {
    Box::new(|s, p| match p {
        Phase::Contract => 0.30 + 0.002 * (s as f32 - 63.0),
        _ if s < 40 => 0.7 - 0.01 * s as f32,
        _ => 0.30,
    })
}

/// Validation that falls until step 40, then holds at 0.30 (stable).
pub(crate) fn settles() -> Curve {
    Box::new(|s, _| if s < 40 { 0.7 - 0.01 * s as f32 } else { 0.30 })
}
