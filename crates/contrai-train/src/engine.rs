//! The Burn engine: it carries out what the conductor (`contrai-lifecycle`) decides and reports
//! what happened. It holds no lifecycle rule of its own — when to evaluate, checkpoint, prune,
//! roll back or move on is the conductor's; how to do it on Burn tensors is here.
//!
//! The loop: carry out the turn's actions, answer its request (a training step, an evaluation,
//! a measurement, a restore …), hand the observation to the conductor, repeat until it says the
//! run is finished or failed.

use std::collections::BTreeSet;
use std::time::Instant;

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::tensor::Device;
use contrai_data::Progress;
use contrai_lifecycle::{
    Action, Conductor, Observation, PruneOrder, Request, RunInfo, SkippedBatch, StepPlan, Task,
    preflight::Tuning,
};
use contrai_recipe::{Phase, Recipe};
use contrai_run::{
    EvalRow, FinalEval, MetricsRow, QuarantineEntry, RunDir, SparsityRow, TrainRow, ValidateRow, Variant,
};

use crate::batch::{Batcher, Cursor};
use crate::checkpoint::{self, Kind, Loaded};
use crate::distill::Fitted;
use crate::dropout::Dropout;
use crate::error::{Result, TrainError};
use crate::evaluate::{eval_batch, evaluate};
use crate::journal::Journal;
use crate::model::Classifier;
use crate::options::{Log, Options, Outcome};
use crate::prune::{Masks, Structure, apply_masks, matrix_paths, update_all};
use crate::setup::{Setup, TrainData};
use crate::step::{clip_grads, grad_norm, optimizer, step_grads, ungraded};

mod steps;

/// Runs (or resumes) the recipe's lifecycle in `opts.run_dir`.
pub fn train(opts: &Options, data_progress: &dyn Progress, log: &dyn Log) -> Result<Outcome> {
    let run = RunDir::new(&opts.run_dir);
    let lock = contrai_base::DirLock::acquire(run.path())?;
    for f in lock.removed() {
        log.warn(&contrai_base::lock::removed_note(f));
    }
    if opts.resume && run.is_finished() {
        return Engine::already_finished(opts, &run, log);
    }
    let setup = Setup::open(opts, data_progress, log)?;
    let (mut engine, mut conductor) = Engine::start(opts, setup, log)?;
    let mut turn = conductor.begin()?;
    loop {
        for action in turn.actions {
            engine.carry_out(action)?;
        }
        let observation = match turn.request {
            Request::Train(_) if engine.step >= opts.stop_after.unwrap_or(u64::MAX) => {
                return Ok(engine.outcome(None));
            }
            Request::Train(_) if let Some(signal) = opts.stop.requested() => {
                return engine.stop(signal, conductor.state().clone());
            }
            Request::Train(plan) => engine.train_step(plan)?,
            Request::Finish(summary) => return engine.finish(*summary),
            Request::Fail(failure) => return Err(failure.into()),
            request => engine.answer(request)?,
        };
        turn = conductor.observe(observation)?;
    }
}

/// What the end has made so far.
#[derive(Default)]
pub(crate) struct Finale {
    /// The final model as `final/model.safetensors` holds it (compacted), and what compaction
    /// removed: the model card measures this one.
    pub exported: Option<(Classifier, crate::compact::Removed)>,
    /// The final model's validation loss and accuracy.
    pub val: (f32, f32),
    /// The distilled student.
    pub student: Option<Fitted>,
    /// The int8 model, its record and its validation accuracy.
    pub int8: Option<(Classifier, Vec<u8>, f32)>,
    /// The holdout's loss, accuracy and samples.
    pub holdout: (f32, f32, usize),
    /// The student's row of the model card.
    pub student_variant: Option<Variant>,
}

/// The model, its optimizer and its pruning masks.
pub(crate) struct Net {
    /// The model (on the autodiff device).
    pub model: Classifier,
    /// AdamW's state.
    pub optim: ModuleOptimizer,
    /// Keep-masks of the pruned weights, applied after every optimizer step.
    pub masks: Masks,
}

/// Which rows train, in what order, at what batch and dropout.
struct Order {
    phase: Phase,
    rows: Vec<usize>,
    batch: usize,
    dropout_scale: f64,
    cursor: Cursor,
    batcher: Option<Batcher>,
    /// Batches spike triage took out: passed over when their step draws them again.
    skipped: Vec<SkippedBatch>,
}

/// Session timers (what a caller reports about this process's share of the run).
#[derive(Default)]
struct Clock {
    session: Option<Instant>,
    base_wall: f64,
    step_s: f64,
    steps: u64,
    checkpoint_s: f64,
    checkpoints: u32,
}

/// Timed steps of a session after which it estimates the time left (the first steps are slower:
/// buffers are allocated, caches cold).
const PACE_STEPS: u64 = 20;

impl Clock {
    /// Training seconds so far, over every session of the run.
    fn wall(&self) -> f64 {
        self.base_wall + self.session.map_or(0.0, |s| s.elapsed().as_secs_f64())
    }

    /// The clock of a session continuing a run that had trained `wall_s` seconds.
    fn restart(&mut self, wall_s: f64) {
        self.base_wall = wall_s;
        self.session = Some(Instant::now());
    }
}

/// The Burn engine of one run.
pub(crate) struct Engine<'a> {
    pub opts: &'a Options,
    pub recipe: Recipe,
    pub run: RunDir,
    pub data: TrainData,
    pub net: Net,
    /// The device training runs on (autodiff) and the plain one evaluation runs on.
    pub device: Device,
    pub plain: Device,
    order: Order,
    pub journal: Journal<'a>,
    clock: Clock,
    /// Optimizer steps done (validate's check included).
    pub step: u64,
    samples: u64,
    wall_s: f64,
    /// The last step's loss and LR (for the console's evaluation line).
    last: (f32, f64),
    validate_steps: u64,
    resumed_from: Option<u64>,
    injected: bool,
    pub finale: Finale,
}

impl<'a> Engine<'a> {
    /// The engine of `setup`'s run and its conductor: fresh, or resumed from the newest valid
    /// checkpoint (journals cut back to it, the live doctor rebuilt from its metrics).
    fn start(opts: &'a Options, setup: Setup, log: &'a dyn Log) -> Result<(Engine<'a>, Conductor)> {
        crate::process::setup();
        let Setup { recipe, data } = setup;
        let device = Device::flex().autodiff();
        let classes = data.extras.classes.names.len();
        let width = data.extras.encoder.width();
        let model = Classifier::new(&recipe.model, classes, width, recipe.run.seed, &device)?;
        let run = RunDir::new(&opts.run_dir);
        let loaded = match opts.resume {
            true => checkpoint::load_latest(&run.checkpoints(), &[Kind::Scheduled, Kind::Stop], &mut |w| {
                log.warn(&w)
            })?,
            false => None,
        };
        if opts.resume && loaded.is_none() && run.metrics().metadata().is_ok_and(|m| m.len() > 0) {
            log.warn("no valid checkpoint to resume from; starting over");
        }
        let lens = loaded.as_ref().map_or((0, 0, 0), |l| {
            let e = &l.state.engine;
            (e.metrics_len, e.decisions_len, e.quarantine_len)
        });
        let info = RunInfo {
            train_samples: data.train.len(),
            classes,
            weights: matrix_paths(&model),
            heads: (recipe.model.kind != contrai_recipe::ModelKind::Mlp).then_some(recipe.model.heads),
            job_steps: None,
            gradient_checkpointing: None,
            tuning: Some(match recipe.model.lora {
                Some(_) => Tuning::Lora,
                None => Tuning::Full,
            }),
            task: Task::Classification,
        };
        let model = match &recipe.model.lora {
            Some(l) => {
                let model = crate::lora::attach(model, l, recipe.run.seed)?;
                let (trainable, all) = crate::lora::trainable(&model);
                log.info(&format!(
                    "LoRA: {} adapters of rank {}; {trainable} of {all} parameters train until main ends",
                    crate::lora::adapters(&model),
                    l.rank
                ));
                model
            }
            None => model,
        };
        let validate_steps = contrai_lifecycle::PhaseSteps::new(&recipe).validate;
        let mut engine = Engine {
            opts,
            net: Net {
                optim: optimizer(&recipe),
                model,
                masks: Masks::default(),
            },
            order: Order {
                phase: Phase::Main,
                rows: (0..data.train.len()).collect(),
                batch: recipe.main.batch,
                dropout_scale: 1.0,
                cursor: Cursor::default(),
                batcher: None,
                skipped: Vec::new(),
            },
            journal: Journal::open(&run, lens, log)?,
            recipe,
            run,
            data,
            device,
            plain: Device::flex(),
            clock: Clock::default(),
            step: 0,
            samples: 0,
            wall_s: 0.0,
            last: (f32::NAN, 0.0),
            validate_steps,
            resumed_from: None,
            injected: false,
            finale: Finale::default(),
        };
        engine.clock.restart(0.0);
        let conductor = match loaded {
            Some(l) => {
                log.info(&format!(
                    "resuming from {} (step {})",
                    l.dir.display(),
                    l.state.engine.step
                ));
                engine.resumed_from = Some(l.state.engine.step);
                let metrics_len = l.state.engine.metrics_len;
                let state = engine.load(l, true)?;
                let history = engine.history(metrics_len)?;
                Conductor::resume(engine.recipe.clone(), info, state, &history)?
            }
            None => Conductor::new(engine.recipe.clone(), info),
        };
        if opts.resume {
            checkpoint::discard_after(&engine.run.checkpoints(), engine.step)?;
        }
        let total = contrai_lifecycle::PhaseSteps::new(&engine.recipe).all();
        engine.journal.start_bar(total, engine.step, opts.progress_bar);
        Ok((engine, conductor))
    }

    /// Carries out an action.
    fn carry_out(&mut self, action: Action) -> Result<()> {
        match action {
            Action::Record(d) => self.journal.decide(&d)?,
            Action::Replan(plan) => contrai_run::write_json(&self.run.plan(), &plan)?,
            Action::SetPhase { phase, restart_order } => {
                self.order.phase = phase;
                if restart_order {
                    self.order.cursor = Cursor::default();
                }
                self.order.batcher = None;
            }
            Action::MergeAdapters => self.merge_lora(),
            Action::SetBatch(batch) => {
                self.order.batch = batch;
                self.order.batcher = None;
            }
            Action::ScaleDropout(scale) => self.order.dropout_scale = scale,
            Action::DropSamples { rows } => {
                let n = self.data.train.len();
                self.order.rows = (0..n).filter(|i| rows.binary_search(i).is_err()).collect();
                self.order.batcher = None;
            }
            Action::Quarantine(entry) => self.quarantine(entry)?,
            Action::SkipBatches { batches } => self.order.skipped = batches,
            Action::Checkpoint { state, keep } => self.checkpoint(*state, &keep)?,
        }
        Ok(())
    }

    /// Writes a spike's entry to `quarantine.jsonl` with the sample ids of its rows.
    fn quarantine(&mut self, mut entry: QuarantineEntry) -> Result<()> {
        let ids = &self.data.train_ids;
        entry.ids = entry
            .rows
            .iter()
            .map(|r| ids.get(*r as usize).cloned().unwrap_or_default())
            .collect();
        self.journal.quarantine(&entry)
    }

    /// Folds a LoRA fine-tune's adapters into the weights (the conductor's
    /// [`Action::MergeAdapters`], or an export: its format holds dense weights); the merged
    /// weights get a fresh optimizer.
    pub(crate) fn merge_lora(&mut self) {
        let n = crate::lora::adapters(&self.net.model);
        if n > 0 {
            self.net.model = crate::lora::merge(self.net.model.clone());
            self.net.optim = optimizer(&self.recipe);
            self.journal
                .say(&format!("LoRA: {n} adapters merged into the encoder's weights"));
        }
    }

    /// Answers a request with what it observed.
    fn answer(&mut self, request: Request) -> Result<Observation> {
        match request {
            Request::CheckPipeline { steps, batch, lr } => self.check_pipeline(steps, batch, lr),
            Request::RoundTrip => self.round_trip(),
            Request::Evaluate { record } => self.evaluate(record),
            Request::Restore { to, scope } => self.restore(to, scope),
            Request::Prune(order) => self.prune(&order),
            Request::MeasureSampleLosses => Ok(Observation::SampleLosses {
                losses: crate::measure::per_sample_losses(
                    &self.net.model.valid(),
                    &self.data.train,
                    self.eval_batch(),
                    &self.plain,
                ),
                ids: self.data.train_ids.clone(),
            }),
            Request::MeasureSensitivity {
                modules,
                levels,
                heads,
                units,
                samples,
                stop_above,
                linearized,
            } => {
                let scan = crate::measure::Scan {
                    levels: &levels,
                    samples,
                    stop_above,
                    structure: Structure::new(heads, units),
                };
                let log = self.journal.log();
                let mut progress = |line: String| log.info(&line);
                let (val_loss, base) = if linearized {
                    crate::measure::linearized(
                        &self.net.model,
                        &self.data.val,
                        &self.device,
                        &modules,
                        scan,
                        &mut progress,
                    )
                } else {
                    crate::measure::sensitivity(
                        &self.net.model.valid(),
                        &self.data.val,
                        (self.eval_batch(), &self.plain),
                        &modules,
                        scan,
                        &mut progress,
                    )
                };
                Ok(Observation::Sensitivity {
                    val_loss,
                    base: Some(base),
                })
            }
            Request::MeasureJoint {
                sparsity,
                heads,
                units,
                samples,
            } => Ok(Observation::JointLoss {
                val_loss: crate::measure::joint(
                    &self.net.model.valid(),
                    &self.data.val,
                    (self.eval_batch(), &self.plain),
                    &sparsity,
                    (Structure::new(heads, units), samples),
                ),
            }),
            Request::Export => self.export(),
            Request::Distil => self.distil(),
            Request::Quantize { to, block } => self.quantize(to, block),
            Request::ReadHoldout { quantized } => self.read_holdout(&quantized),
            Request::Train(_) | Request::Finish(_) | Request::Fail(_) => Err(TrainError::Unsupported(
                "internal: the loop answers training steps, the finish and failures itself".into(),
            )),
        }
    }

    /// Validate's check: overfits one small batch (dropout off) on a copy of the fresh model, then
    /// evaluates the fresh model.
    fn check_pipeline(&mut self, steps: u64, batch: usize, lr: f64) -> Result<Observation> {
        let train = &self.data.train;
        let seed = self.recipe.run.seed ^ 0x5A1D;
        let mut pick = Batcher::new(train.len(), batch.min(train.len()), seed, Cursor::default())?;
        let b = train.batch(&pick.next_batch(), &self.device);
        let mut model = self.net.model.clone();
        let mut optim = optimizer(&self.recipe);
        let mut losses = Vec::with_capacity(steps as usize);
        let recompute = self.recipe.model.gradient_checkpointing;
        let mut missing: Option<BTreeSet<String>> = None;
        for _ in 0..steps {
            let (grads, loss) = step_grads(&model, std::slice::from_ref(&b), &[None], false, recompute);
            if missing.as_ref().is_none_or(|m| !m.is_empty()) {
                missing = Some(ungraded(&model, &grads, missing.as_ref()));
            }
            model = optim.step(lr, model, grads);
            losses.push(loss);
            self.step += 1;
            self.journal.metric(MetricsRow::Validate(ValidateRow {
                step: self.step,
                phase: Phase::Validate,
                validate_loss: loss,
            }))?;
            self.journal.progress(self.step, None);
        }
        let (val_loss, _) = evaluate(
            &self.net.model.valid(),
            &self.data.val,
            self.eval_batch(),
            &self.plain,
        );
        Ok(Observation::PipelineChecked {
            first_loss: losses.first().copied().unwrap_or(f32::NAN),
            last_loss: losses.last().copied().unwrap_or(f32::NAN),
            val_loss,
            no_gradient: missing.unwrap_or_default().into_iter().collect(),
            losses,
        })
    }

    /// Evaluates on validation; writes the row when asked.
    fn evaluate(&mut self, record: Option<Phase>) -> Result<Observation> {
        let (val_loss, val_accuracy) = evaluate(
            &self.net.model.valid(),
            &self.data.val,
            self.eval_batch(),
            &self.plain,
        );
        if let Some(phase) = record {
            self.journal.metric(MetricsRow::Eval(EvalRow {
                step: self.step,
                phase,
                val_loss,
                val_accuracy,
            }))?;
            if phase.trains() {
                let (loss, lr) = self.last;
                self.journal.say(&format!(
                    "{:>8} step {:>6}  train_loss {loss:.4}  val_loss {val_loss:.4}  val_accuracy {:.2} %  lr {lr:.2e}",
                    phase.as_ref(),
                    self.step,
                    val_accuracy * 100.0
                ));
            }
        }
        Ok(Observation::Evaluated {
            val_loss,
            val_accuracy,
        })
    }

    /// Sets the pruning masks of the order's targets and applies them.
    fn prune(&mut self, order: &PruneOrder) -> Result<Observation> {
        let target = |p: &str| order.targets.get(p).copied();
        let mut masks = std::mem::take(&mut self.net.masks);
        update_all(
            &self.net.model,
            &mut masks,
            &target,
            order.scope,
            Structure::new(order.heads, order.units),
        );
        self.net.model = apply_masks(self.net.model.clone(), &masks);
        self.net.masks = masks;
        self.record_sparsity()?;
        Ok(Observation::Pruned {
            sparsity: self.net.masks.by_module(),
        })
    }

    /// A `metrics.jsonl` row of the overall and per-module sparsity at this step.
    pub(crate) fn record_sparsity(&mut self) -> Result<()> {
        self.journal.metric(MetricsRow::Sparsity(SparsityRow {
            step: self.step,
            phase: self.order.phase,
            overall: self.net.masks.overall(),
            modules: self.net.masks.by_module(),
        }))
    }

    /// Loads a checkpoint's model, optimizer and masks and, when `everything`, the engine's
    /// counters, data position and clock; returns the conductor state it holds.
    pub(crate) fn load(&mut self, l: Loaded, everything: bool) -> Result<contrai_lifecycle::State> {
        use burn::tensor::Bytes;
        self.net.model = l.weights_into(self.net.model.clone(), &self.recipe.model)?;
        self.net.masks = l.masks()?;
        self.net.optim = optimizer(&self.recipe)
            .from_bytes(Bytes::from_bytes_vec(l.optimizer))
            .map_err(|e| crate::error::record_err(&l.dir, e))?;
        if everything {
            let e = &l.state.engine;
            self.step = e.step;
            self.samples = e.samples;
            self.wall_s = e.wall_s;
            self.order.cursor = e.cursor;
            self.order.batcher = None;
            self.clock.restart(e.wall_s);
        }
        Ok(l.state.conductor)
    }

    /// `metrics.jsonl`'s rows up to `len` bytes (the live doctor is rebuilt from them).
    pub(crate) fn history(&self, len: u64) -> Result<Vec<MetricsRow>> {
        let rows = contrai_run::read_jsonl(&self.run.metrics(), Some(len), MetricsRow::parse)?;
        Ok(rows.into_iter().map(|(_, r)| r).collect())
    }

    /// The batch evaluation runs in.
    pub(crate) fn eval_batch(&self) -> usize {
        eval_batch(&self.recipe)
    }

    /// The training rows in use (all, or those the noisy-sample filter kept).
    pub(crate) fn rows(&self) -> &[usize] {
        &self.order.rows
    }

    /// The engine's counters as a checkpoint records them.
    pub(crate) fn engine_state(
        &self,
        (metrics_len, decisions_len, quarantine_len): crate::journal::Lengths,
    ) -> checkpoint::EngineState {
        checkpoint::EngineState {
            step: self.step,
            samples: self.samples,
            cursor: self.order.cursor,
            rng: checkpoint::RngState {
                scheme: "splitmix64-masks+chacha8-epochs".into(),
                seed: self.recipe.run.seed,
                next_step: self.step,
            },
            wall_s: self.wall_s,
            metrics_len,
            decisions_len,
            quarantine_len,
            lora: crate::lora::adapters(&self.net.model) > 0,
        }
    }

    /// Counts a checkpoint written in `t`.
    pub(crate) fn checkpoint_timed(&mut self, t: Instant) {
        self.clock.checkpoint_s += t.elapsed().as_secs_f64();
        self.clock.checkpoints += 1;
    }

    /// What this session did (`eval` when the run finished).
    pub(crate) fn outcome(&self, eval: Option<FinalEval>) -> Outcome {
        let t = &self.clock;
        Outcome {
            run_dir: self.run.path().to_path_buf(),
            step: self.step,
            finished: eval.is_some(),
            resumed_from: self.resumed_from,
            eval,
            ms_per_step: if t.steps > 0 {
                t.step_s * 1000.0 / t.steps as f64
            } else {
                0.0
            },
            ms_per_checkpoint: if t.checkpoints > 0 {
                t.checkpoint_s * 1000.0 / f64::from(t.checkpoints)
            } else {
                0.0
            },
            effective_batch: self.recipe.main.effective_batch(),
            stopped: None,
        }
    }

    /// Stops before the next step on `signal`'s request: the step's checkpoint written (unless
    /// the schedule just wrote it), the bar cleared.
    fn stop(&mut self, signal: crate::Signal, conductor: contrai_lifecycle::State) -> Result<Outcome> {
        let checkpoint = self.stop_checkpoint(conductor)?;
        self.journal.finish_bar();
        Ok(Outcome {
            stopped: Some(crate::Stopped { signal, checkpoint }),
            ..self.outcome(None)
        })
    }

    /// A resumed run that had already finished: its evaluation, nothing changed.
    fn already_finished(opts: &Options, run: &RunDir, log: &dyn Log) -> Result<Outcome> {
        let eval: FinalEval = contrai_run::read_json(&run.eval())?;
        log.info(&format!("{} is already complete", run.path().display()));
        let recipe = match run.recipe().is_file() {
            true => Recipe::from_file(&run.recipe()).map_err(|e| TrainError::Unsupported(e.to_string()))?,
            false => opts.recipe.clone(),
        };
        Ok(Outcome {
            run_dir: run.path().to_path_buf(),
            step: eval.step,
            finished: true,
            resumed_from: Some(eval.step),
            eval: Some(eval),
            ms_per_step: 0.0,
            ms_per_checkpoint: 0.0,
            effective_batch: recipe.main.effective_batch(),
            stopped: None,
        })
    }
}

/// A step's training rows, sorted (its micro-batches together).
fn step_rows(micros: &[Vec<usize>]) -> Vec<u64> {
    let mut rows: Vec<u64> = micros.iter().flatten().map(|r| *r as u64).collect();
    rows.sort_unstable();
    rows.dedup();
    rows
}
