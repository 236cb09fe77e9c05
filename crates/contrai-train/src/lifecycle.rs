//! The lifecycle (`../shared/DESIGN.md` §1): `validate`, `main`, `diagnose`, `contract`, `refine`
//! in order, watched by the live doctor and the controller's guards, resumable at any step.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::tensor::Device;
use contrai_data::Progress;
use contrai_doctor::{Doctor, DoctorConfig, Label, RunHints, Series, XUnit};
use contrai_recipe::Recipe;
use contrai_recipe::plan::{CONTRACT_FLOOR, PhaseSteps, main_schedule};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use crate::batch::{Batcher, Cursor, Encoded, Encoder};
use crate::checkpoint::{self, Loaded, MASKS, RngState, State};
use crate::controller::{Action, Control, Decision, linear};
use crate::data::Holdout;
use crate::distill::{FitData, Fitted, student_note, student_size};
use crate::dropout::Dropout;
use crate::error::{Result, TrainError};
use crate::export::{LATENCY_BATCH, Measured, Variant, time_variants};
use crate::metrics::{EvalRow, JsonLines, TrainRow, ValidateRow};
use crate::model::Classifier;
use crate::prune::{Masks, Scope, Target, apply_masks, module_of, scheduled_sparsity, update_all};
use crate::quantize::{quantize_int8, record_bytes, scheme_text};
use crate::setup::Setup;
use crate::trainer::record_err;
use crate::trainer::{
    self, FinalEval, Int8Eval, Log, Options, Outcome, clip_grads, evaluate, grad_norm, step_grads,
};

/// Sparsity levels the `diagnose` phase prunes each module to, one at a time, on a copy.
pub const SENSITIVITY_LEVELS: [f64; 4] = [0.1, 0.2, 0.3, 0.5];
/// The int8 model's burnpack record in `final/`.
pub const INT8_MODEL: &str = "model-int8.bpk";
/// The distilled student's weights in `final/`.
pub const STUDENT_MODEL: &str = "student.safetensors";
/// The default cap of attention weights: zeroing single weights inside attention breaks heads.
pub const ATTENTION_CAP: f64 = 0.2;

/// Runs (or resumes) the recipe's phases in `opts.run_dir`.
pub fn train(opts: &Options, data_progress: &dyn Progress, log: &dyn Log) -> Result<Outcome> {
    let setup = Setup::open(opts, data_progress, log)?;
    let mut runner = Runner::new(opts, setup, log)?;
    runner.run()
}

/// Session timers (what a caller reports about this process's share of the run).
#[derive(Default)]
struct Timing {
    step_s: f64,
    steps: u64,
    checkpoint_s: f64,
    checkpoints: u32,
}

/// How a phase's loop ended.
enum Ended {
    /// Its steps are done, or the controller ended it.
    Phase,
    /// `stop_after` was reached.
    Stopped,
}

struct Runner<'a> {
    opts: &'a Options,
    log: &'a dyn Log,
    recipe: Recipe,
    run: PathBuf,
    device: Device,
    plain: Device,
    train_set: Encoded,
    train_ids: Vec<String>,
    val_set: Encoded,
    holdout: Holdout,
    setup_extras: crate::setup::Extras,
    model: Classifier,
    optim: ModuleOptimizer,
    masks: Masks,
    state: State,
    metrics: JsonLines,
    decisions: JsonLines,
    batcher: Batcher,
    rows: Vec<usize>,
    doctor: Doctor,
    plateau: Doctor,
    steps: PhaseSteps,
    bar: ProgressBar,
    session: Instant,
    base_wall: f64,
    timing: Timing,
    resumed_from: Option<u64>,
    injected: bool,
}

impl<'a> Runner<'a> {
    fn new(opts: &'a Options, setup: Setup, log: &'a dyn Log) -> Result<Self> {
        crate::alloc::keep_freed_memory();
        let recipe = setup.recipe;
        let device = Device::flex().autodiff();
        let seed = recipe.run.seed;
        let classes = setup.extras.classes.names.len();
        let model = Classifier::new(
            &recipe.model,
            classes,
            setup.extras.encoder.width(),
            seed,
            &device,
        )?;
        let first = recipe.run.phases[0].clone();
        let state = State {
            format: checkpoint::FORMAT,
            phase: first,
            step: 0,
            samples: 0,
            cursor: Cursor::default(),
            rng: RngState {
                scheme: "splitmix64-masks+chacha8-epochs".into(),
                seed,
                next_step: 0,
            },
            wall_s: 0.0,
            metrics_len: 0,
            val_loss: None,
            best: None,
            lr: 0.0,
            decisions_len: 0,
            control: Control::default(),
        };
        let steps = PhaseSteps::new(&recipe);
        let train_rows: Vec<usize> = (0..setup.train.len()).collect();
        let batcher = Batcher::new(setup.train.len(), recipe.main.batch, seed, Cursor::default())?;
        let run = opts.run_dir.clone();
        let root = run.join("checkpoints");
        let loaded = match opts.resume {
            true => checkpoint::load_latest(&root, &mut |w| log.warn(&w))?,
            false => None,
        };
        let (mlen, dlen) = loaded
            .as_ref()
            .map_or((0, 0), |l| (l.state.metrics_len, l.state.decisions_len));
        if opts.resume && loaded.is_none() && run.join("metrics.jsonl").metadata().is_ok_and(|m| m.len() > 0)
        {
            log.warn("no valid checkpoint to resume from; starting over");
        }
        let mut r = Runner {
            opts,
            log,
            metrics: JsonLines::open(&run.join("metrics.jsonl"), mlen)?,
            decisions: JsonLines::open(&run.join("decisions.jsonl"), dlen)?,
            optim: trainer::optimizer(&recipe),
            doctor: Doctor::default(),
            plateau: Doctor::default(),
            recipe,
            run,
            device,
            plain: Device::flex(),
            train_set: setup.train,
            train_ids: setup.train_ids,
            val_set: setup.val,
            holdout: setup.holdout,
            setup_extras: setup.extras,
            model,
            masks: Masks::default(),
            state,
            batcher,
            rows: train_rows,
            steps,
            bar: ProgressBar::hidden(),
            session: Instant::now(),
            base_wall: 0.0,
            timing: Timing::default(),
            resumed_from: None,
            injected: false,
        };
        match loaded {
            Some(l) => {
                log.info(&format!(
                    "resuming from {} (step {})",
                    l.dir.display(),
                    l.state.step
                ));
                r.resumed_from = Some(l.state.step);
                r.restore(l, true, false)?;
            }
            None => r.rebuild_watch()?,
        }
        if opts.resume {
            checkpoint::discard_after(&root, r.state.step)?;
        }
        Ok(r)
    }

    /// Loads a checkpoint's weights, optimizer and (when `all`) its counters, cursor and metrics;
    /// `decisions.jsonl` is cut back too unless `keep_decisions` (a rollback keeps its reason).
    fn restore(&mut self, l: Loaded, all: bool, keep_decisions: bool) -> Result<()> {
        use burn::tensor::Bytes;
        self.model = l.weights_into(self.model.clone())?;
        self.masks = l.masks()?;
        self.optim = trainer::optimizer(&self.recipe)
            .from_bytes(Bytes::from_bytes_vec(l.optimizer))
            .map_err(|e| record_err(&l.dir, e))?;
        if all {
            self.state = l.state;
            self.metrics = JsonLines::open(&self.run.join("metrics.jsonl"), self.state.metrics_len)?;
            if keep_decisions {
                self.state.decisions_len = self.decisions.len();
            } else {
                self.decisions =
                    JsonLines::open(&self.run.join("decisions.jsonl"), self.state.decisions_len)?;
            }
            self.base_wall = self.state.wall_s;
            self.session = Instant::now();
            self.rebuild_batcher()?;
            self.rebuild_watch()?;
        }
        Ok(())
    }

    fn run(&mut self) -> Result<Outcome> {
        self.start_bar();
        if self.state.phase == "validate" {
            self.validate()?;
        }
        if self.state.step == self.steps.validate
            && self.state.phase == "main"
            && self.state.control.phase_steps == 0
        {
            self.enter_main()?;
        }
        while matches!(self.state.phase.as_str(), "main" | "contract" | "refine") {
            if let Ended::Stopped = self.train_phase()? {
                return Ok(self.outcome(false));
            }
            self.next_phase()?;
        }
        self.bar.finish_and_clear();
        let mut out = self.outcome(true);
        out.eval = Some(self.finish()?);
        Ok(out)
    }

    // ---- phases -------------------------------------------------------------------------------

    /// Overfits one small batch (dropout off) on a copy of the fresh model: the loss must fall by
    /// more than `validate.min_fall`. Then the main phase's first checkpoint makes the round trip.
    fn validate(&mut self) -> Result<()> {
        let v = self.recipe.validate.clone();
        let mut pick = Batcher::new(
            self.train_set.len(),
            v.batch.min(self.train_set.len()),
            self.recipe.run.seed ^ 0x5A1D,
            Cursor::default(),
        )?;
        let batch = self.train_set.batch(&pick.next_batch(), &self.device);
        let mut model = self.model.clone();
        let mut optim = trainer::optimizer(&self.recipe);
        let mut losses = Vec::with_capacity(v.steps as usize);
        for _ in 0..v.steps {
            let (grads, loss) = step_grads(&model, std::slice::from_ref(&batch), &[None], false);
            model = optim.step(v.lr, model, grads);
            losses.push(loss);
            self.state.step += 1;
            self.metrics.write(&ValidateRow {
                step: self.state.step,
                phase: "validate",
                validate_loss: loss,
            })?;
            self.bar.set_position(self.state.step);
        }
        let (first, last) = (losses[0], *losses.last().unwrap_or(&f32::NAN));
        let fall = 1.0 - f64::from(last) / f64::from(first);
        let (val_loss, _) = evaluate(&self.model.valid(), &self.val_set, self.eval_batch(), &self.plain);
        let evidence = json!({"first_loss": first, "last_loss": last, "fall": fall, "min_fall": v.min_fall,
                              "batch": v.batch, "steps": v.steps, "val_loss": val_loss});
        let learned = fall.is_finite() && fall > v.min_fall;
        if !learned || !val_loss.is_finite() {
            let reason = format!(
                "the model could not overfit one batch of {}: its loss went {first:.4} → {last:.4} (−{:.1} %, needs −{:.0} %) in {} steps, or the evaluation was not finite ({val_loss}); check the labels, the learning rate and the model before spending the main compute",
                v.batch,
                100.0 * fall,
                100.0 * v.min_fall,
                v.steps
            );
            self.decide(Decision::new(
                self.state.step,
                "validate",
                "validate_failed",
                reason.clone(),
                evidence,
            ))?;
            return Err(TrainError::ValidateFailed(reason));
        }
        self.decide(Decision::new(
            self.state.step,
            "validate",
            "validate_passed",
            format!("overfitting one batch of {} took its loss {first:.4} → {last:.4} (−{:.1} %) in {} steps; one evaluation ran (val loss {val_loss:.4}); main starts from the fresh model", v.batch, 100.0 * fall, v.steps),
            evidence,
        ))?;
        self.state.phase = "main".into();
        Ok(())
    }

    /// Starts main: its schedule and batch; a checkpoint written to a scratch directory and read
    /// back into an identical model proves the round trip; then main's first checkpoint.
    fn enter_main(&mut self) -> Result<()> {
        let c = &mut self.state.control;
        c.phase_start = self.state.step;
        c.phase_steps = self.steps.main;
        c.phase_lr0 = self.recipe.main.lr;
        self.rebuild_batcher()?;
        if self.recipe.run.has_phase("validate") {
            self.round_trip()?;
        }
        self.checkpoint()?;
        Ok(())
    }

    /// Writes the model and optimizer as a checkpoint, verifies and reloads it, and compares.
    fn round_trip(&mut self) -> Result<()> {
        let scratch = self.run.join("checkpoints").join(".tmp-round-trip");
        let (model, optim) = self.snapshot(&scratch)?;
        let dir = checkpoint::save(&scratch, &self.state, &model, &optim, &[])?;
        let back = checkpoint::load(&dir)?;
        let before = self.probe_logits();
        self.restore(back, false, true)?;
        let same = before == self.probe_logits();
        std::fs::remove_dir_all(&scratch).map_err(|e| TrainError::io(&scratch, e))?;
        if !same {
            return Err(TrainError::ValidateFailed(
                "a checkpoint read back does not reproduce the model it saved".into(),
            ));
        }
        self.decide(Decision::new(
            self.state.step,
            "validate",
            "checkpoint_round_trip",
            format!(
                "a checkpoint of the fresh model ({} + {} bytes) was written, verified against its SHA-256 sums and read back into a model with identical outputs",
                model.len(),
                optim.len()
            ),
            json!({"model_bytes": model.len(), "optimizer_bytes": optim.len()}),
        ))
    }

    /// The logits of the first validation samples (a fingerprint of the weights).
    fn probe_logits(&self) -> Vec<f32> {
        let n = self.val_set.len().min(8);
        if n == 0 {
            return Vec::new();
        }
        let rows: Vec<usize> = (0..n).collect();
        let b = self.val_set.batch(&rows, &self.plain);
        self.model
            .valid()
            .forward(&b, None)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap_or_default()
    }

    /// The optimizer steps of main, contract or refine until the phase ends.
    fn train_phase(&mut self) -> Result<Ended> {
        let stop = self.opts.stop_after.unwrap_or(u64::MAX);
        loop {
            let c = &self.state.control;
            if self.state.step >= c.phase_start + c.phase_steps {
                return Ok(Ended::Phase);
            }
            if self.state.step >= stop {
                return Ok(Ended::Stopped);
            }
            let Some((loss, norm, lr)) = self.optimizer_step()? else {
                continue;
            };
            let action = self.after_step(loss, norm, lr)?;
            match action {
                Action::Continue => {}
                Action::EndPhase(d) => {
                    self.end_phase(d)?;
                    return Ok(Ended::Phase);
                }
                Action::RollbackToBest(d) => {
                    self.rollback_to_best()?;
                    self.end_phase(d)?;
                    return Ok(Ended::Phase);
                }
            }
        }
    }

    /// One optimizer step; `None` when a non-finite value rolled the run back instead.
    fn optimizer_step(&mut self) -> Result<Option<(f32, f32, f64)>> {
        let t0 = Instant::now();
        let (phase, step) = (self.state.phase.clone(), self.state.step);
        let k = step - self.state.control.phase_start;
        let lr = self.scheduled_lr(k) * self.state.control.lr_scale;
        let accumulate = self.recipe.main.accumulate;
        let p = match phase.as_str() {
            "main" => self.recipe.model.dropout,
            _ => self.recipe.model.dropout * self.recipe.contract.dropout_scale,
        };
        let mut batches = Vec::with_capacity(accumulate);
        let mut drops = Vec::with_capacity(accumulate);
        // Masks are keyed by the training step, validate's checks not counted: main draws the same
        // masks with or without `validate`, so a plain run is the lifecycle's paired comparison.
        let key = step.saturating_sub(self.steps.validate);
        for micro in 0..accumulate {
            let rows: Vec<usize> = self
                .batcher
                .next_batch()
                .into_iter()
                .map(|i| self.rows[i])
                .collect();
            batches.push(self.train_set.batch(&rows, &self.device));
            drops.push((p > 0.0).then(|| Dropout::new(p, self.recipe.run.seed, key, micro as u64)));
        }
        let poison = self.opts.inject_nonfinite_at == Some(step + 1) && !self.injected;
        self.injected |= poison;
        let (mut grads, loss) = step_grads(&self.model, &batches, &drops, poison);
        let norm = grad_norm(&self.model, &grads);
        if !loss.is_finite() || !norm.is_finite() {
            self.on_nonfinite(loss, norm)?;
            return Ok(None);
        }
        clip_grads(&self.model, &mut grads, norm, self.recipe.main.clip_norm);
        self.model = apply_masks(self.optim.step(lr, self.model.clone(), grads), &self.masks);
        self.timing.step_s += t0.elapsed().as_secs_f64();
        self.timing.steps += 1;
        Ok(Some((loss, norm, lr)))
    }

    /// The scheduled (unscaled) LR of step `k` of the current phase.
    fn scheduled_lr(&self, k: u64) -> f64 {
        let c = &self.state.control;
        match self.state.phase.as_str() {
            "main" => main_schedule(&self.recipe).lr(k),
            "contract" => linear(
                c.phase_lr0,
                self.recipe.main.min_lr * CONTRACT_FLOOR,
                k,
                c.phase_steps,
            ),
            _ => linear(c.phase_lr0, 0.0, k, c.phase_steps),
        }
    }

    /// Records a step, evaluates and checkpoints on cadence, and asks the controller.
    fn after_step(&mut self, loss: f32, norm: f32, lr: f64) -> Result<Action> {
        let phase = self.state.phase.clone();
        let eff = self.batcher_batch() * self.recipe.main.accumulate;
        self.state.step += 1;
        self.state.samples += eff as u64;
        self.state.cursor = self.batcher.cursor;
        self.state.rng.next_step = self.state.step;
        self.state.lr = lr;
        let wall = self.base_wall + self.session.elapsed().as_secs_f64();
        self.state.wall_s = (wall * 1000.0).round() / 1000.0;
        let line = self.metrics.write(&TrainRow {
            step: self.state.step,
            phase: &phase,
            samples: self.state.samples,
            train_loss: loss,
            lr,
            grad_norm: norm,
            batch_size: eff,
            wall_s: (wall * 100.0).round() / 100.0,
        })?;
        let mut action = self.watch(&line, true)?;
        if phase == "contract" {
            let t = &mut self.state.control.train_since_eval;
            *t = (t.0 + f64::from(loss), t.1 + 1);
        }
        self.bar.set_position(self.state.step);
        self.bar
            .set_message(format!("{phase}  loss {loss:.4}  lr {lr:.2e}"));

        let k = self.state.step - self.state.control.phase_start;
        let last = k == self.state.control.phase_steps;
        let every = if phase == "main" {
            self.recipe.run.eval_every
        } else {
            self.recipe.contract.eval_every
        };
        let ck_every = if phase == "main" {
            self.recipe.run.checkpoint_every
        } else {
            self.recipe.contract.eval_every
        };
        if k.is_multiple_of(every) || last {
            let (vl, va) = evaluate(&self.model.valid(), &self.val_set, self.eval_batch(), &self.plain);
            let line = self.metrics.write(&EvalRow {
                step: self.state.step,
                phase: &phase,
                val_loss: vl,
                val_accuracy: va,
            })?;
            self.state.val_loss = Some(vl);
            self.say(&format!(
                "{phase:>8} step {:>6}  train_loss {loss:.4}  val_loss {vl:.4}  val_accuracy {:.2} %  lr {lr:.2e}",
                self.state.step,
                va * 100.0
            ));
            if let Action::Continue = action {
                action = self.watch(&line, true)?;
            }
            if phase == "contract" {
                let now = self.masks.by_module();
                if let Some(d) = self
                    .state
                    .control
                    .divergence(self.state.step, vl, &now, &self.recipe)
                {
                    self.decide(d)?;
                }
            }
            if phase == "contract" && matches!(action, Action::Continue) {
                action = self
                    .state
                    .control
                    .contract_eval(self.state.step, vl, &self.recipe);
            }
        }
        if phase == "contract" && k.is_multiple_of(self.recipe.contract.prune_every) && !last {
            self.prune_update()?;
        }
        if k.is_multiple_of(ck_every) || last {
            if phase == "main"
                && let (Action::Continue, Some(vl)) = (&action, self.state.val_loss)
                && self.recipe.guards.enabled
            {
                action = self
                    .state
                    .control
                    .main_checkpoint(self.state.step, vl, &self.recipe);
            }
            self.checkpoint()?;
        }
        Ok(action)
    }

    /// Feeds one metrics line to the live doctor; acts on what it finds (when `live`).
    fn watch(&mut self, line: &[u8], live: bool) -> Result<Action> {
        let Ok(serde_json::Value::Object(row)) = serde_json::from_slice::<serde_json::Value>(line) else {
            return Ok(Action::Continue);
        };
        if row.get("phase").and_then(|v| v.as_str()) != Some("main") {
            return Ok(Action::Continue);
        }
        let step = row.get("step").and_then(|v| v.as_u64()).unwrap_or(0);
        let plateau_watch =
            row.contains_key("train_loss") && self.state.control.last_cut.is_none_or(|c| step > c);
        let (mut found, mut plateaus) = (Vec::new(), Vec::new());
        for (key, series) in [
            ("train_loss", Series::TrainLoss),
            ("lr", Series::Lr),
            ("grad_norm", Series::GradNorm),
            ("val_loss", Series::ValLoss),
            ("val_accuracy", Series::ValAccuracy),
        ] {
            let Some(x) = row.get(key).and_then(|v| v.as_f64()) else {
                continue;
            };
            found.extend(self.doctor.push(series, step, x));
            if plateau_watch {
                plateaus.extend(
                    self.plateau
                        .push(series, step, x)
                        .into_iter()
                        .filter(|f| f.label == Label::Plateau),
                );
            }
        }
        let enabled = self.recipe.guards.enabled;
        if !live {
            return Ok(Action::Continue);
        }
        if enabled
            && let Some(f) = plateaus.first()
            && let Some(d) = self.state.control.plateau(step, &f.evidence_line(), &self.recipe)
        {
            self.decide(d)?;
            self.plateau = self.fresh_doctor();
        }
        let mut action = Action::Continue;
        for f in found {
            let evidence = json!({"label": f.label.as_str(), "severity": f.severity.to_string(), "evidence": f.evidence});
            match f.label {
                Label::Overfitting if enabled => {
                    action = Action::RollbackToBest(Decision::new(
                        step,
                        "main",
                        "end_main_overfitting",
                        format!(
                            "overfitting onset ({}); main ends early and the best checkpoint is restored",
                            f.evidence_line()
                        ),
                        evidence,
                    ));
                }
                Label::Plateau if enabled => {}
                _ => self.decide(Decision::new(
                    step,
                    "main",
                    "doctor_finding",
                    format!("{} ({}): {}", f.label, f.evidence_line(), f.recommendation),
                    evidence,
                ))?,
            }
        }
        Ok(action)
    }

    /// A doctor with the recipe's patience for this run.
    fn fresh_doctor(&self) -> Doctor {
        let mut d = Doctor::new(DoctorConfig {
            patience_steps: self.recipe.guards.overfit_patience as f64,
            ..DoctorConfig::default()
        });
        d.set_hints(RunHints {
            x_unit: XUnit::Step,
            total_steps: Some(self.steps.validate + self.steps.main),
            num_classes: Some(self.setup_extras.classes.names.len() as u32),
        });
        d
    }

    /// Rebuilds the live doctors from `metrics.jsonl` as far as the state has written it.
    fn rebuild_watch(&mut self) -> Result<()> {
        self.doctor = self.fresh_doctor();
        self.plateau = self.fresh_doctor();
        let path = self.run.join("metrics.jsonl");
        let bytes = std::fs::read(&path).unwrap_or_default();
        let upto = (self.state.metrics_len as usize).min(bytes.len());
        for line in bytes[..upto].split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            self.watch(line, false)?;
        }
        Ok(())
    }

    /// A non-finite loss or gradient: back to the last good checkpoint with a lower LR, or give up.
    fn on_nonfinite(&mut self, loss: f32, norm: f32) -> Result<()> {
        let mut control = self.state.control.clone();
        let phase = self.state.phase.clone();
        match control.nonfinite(self.state.step + 1, &phase, loss, norm, &self.recipe) {
            Err(d) => {
                let reason = d.reason.clone();
                self.decide(d)?;
                Err(TrainError::Diverged(reason))
            }
            Ok(d) => {
                self.decide(d)?;
                let root = self.run.join("checkpoints");
                let log = self.log;
                let l = checkpoint::load_latest(&root, &mut |w| log.warn(&w))?
                    .ok_or_else(|| TrainError::Diverged("no checkpoint to roll back to".into()))?;
                self.restore(l, true, true)?;
                self.state.control.lr_scale = control.lr_scale;
                self.state.control.nan_retries = control.nan_retries;
                checkpoint::discard_after(&root, self.state.step)
            }
        }
    }

    /// Restores the weights, optimizer, masks and LR of the best checkpoint (counters run on): the
    /// run's best in main, the contraction's best in contract.
    fn rollback_to_best(&mut self) -> Result<()> {
        let best = match self.state.phase.as_str() {
            "contract" => self.state.control.contract_best.map(|b| b.0),
            _ => self.state.best.map(|b| b.0),
        };
        let Some(best) = best else {
            return Ok(());
        };
        let dir = self.run.join("checkpoints").join(checkpoint::dir_name(best));
        let l = checkpoint::load(&dir)?;
        let pruned = !self.masks.is_empty();
        // The next phase anneals from the LR the restored weights were trained at, not from the
        // abandoned steps' lower one.
        let lr = l.state.lr;
        self.restore(l, false, true)?;
        self.state.lr = lr;
        // The masks went back with the weights: the sparsity series shows it.
        if pruned {
            self.record_sparsity()?;
        }
        Ok(())
    }

    /// Writes the end-of-phase decision and moves the state to the next phase.
    fn end_phase(&mut self, d: Decision) -> Result<()> {
        if self.state.phase == "main" {
            self.state.control.main_end = Some((self.state.step, d.kind.clone()));
        }
        self.decide(d)
    }

    /// After main, contract or refine: diagnose, then enter whichever phase comes next.
    fn next_phase(&mut self) -> Result<()> {
        let done = self.state.phase.clone();
        if done == "main" && self.state.control.main_end.is_none() {
            let c = &self.state.control;
            let d = Decision::new(
                self.state.step,
                "main",
                "main_complete",
                format!("main ran its {} planned steps", c.phase_steps),
                json!({"steps": c.phase_steps}),
            );
            self.decide(d)?;
            self.state.control.main_end = Some((self.state.step, "main_complete".into()));
        }
        if done == "main" && self.recipe.run.has_phase("diagnose") {
            self.diagnose()?;
        }
        let order = self.recipe.run.phases.clone();
        let mut next = order
            .iter()
            .skip_while(|p| **p != done)
            .skip(1)
            .filter(|p| p.as_str() != "diagnose");
        let mut target = next.next().cloned();
        if target.as_deref() == Some("contract") && !self.contract_allowed()? {
            target = next.next().cloned();
        }
        match target {
            Some(p) => self.enter(&p),
            None => {
                self.state.phase = "done".into();
                Ok(())
            }
        }
    }

    /// Whether contract runs: always after the controller ended main; at main's planned end it is
    /// forced or skipped by the rule of [`Control::force_or_skip`], with the decision recorded.
    fn contract_allowed(&mut self) -> Result<bool> {
        let c = &self.state.control;
        let ended_early = c.main_end.as_ref().is_some_and(|(_, k)| k != "main_complete");
        if ended_early || !self.recipe.guards.enabled {
            return Ok(true);
        }
        let (go, d) = c.force_or_skip(self.state.step, &self.recipe);
        self.decide(d)?;
        Ok(go)
    }

    /// Enters contract or refine: its LR, batch, the noisiest samples dropped; a checkpoint.
    fn enter(&mut self, phase: &str) -> Result<()> {
        let unscaled = self.state.lr / self.state.control.lr_scale;
        // A contraction rolled back early leaves steps unspent: the final anneal takes them, so the
        // budget still trains the restored model instead of being dropped with the contraction.
        let c = &self.state.control;
        let unspent = match self.state.phase.as_str() {
            "contract" => (c.phase_start + c.phase_steps).saturating_sub(self.state.step),
            _ => 0,
        };
        self.state.phase = phase.into();
        if !self.state.control.noisy_checked && self.recipe.contract.drop_noisiest > 0.0 {
            self.drop_noisiest()?;
        }
        let steps = if phase == "contract" {
            self.steps.contract
        } else {
            self.steps.refine + unspent
        };
        // The validation loss of the very model this phase starts from: the contraction's
        // reference (after an overfitting rollback it is not main's last evaluation).
        let (entry_val, _) = evaluate(&self.model.valid(), &self.val_set, self.eval_batch(), &self.plain);
        self.state.val_loss = Some(entry_val);
        let c = &mut self.state.control;
        c.phase_start = self.state.step;
        c.phase_steps = steps;
        c.phase_lr0 = unscaled;
        c.worse_run = 0;
        c.contract_best = Some((self.state.step, entry_val));
        self.state.cursor = Cursor::default();
        self.rebuild_batcher()?;
        let batch = self.recipe.contract.batch * self.recipe.main.accumulate;
        let (lr_end, purpose) = if phase == "contract" {
            (
                self.recipe.main.min_lr * CONTRACT_FLOOR,
                "contract: LR annealed linearly with no warmup, smaller batch, dropout scaled, noisiest samples out; rolled back if validation worsens",
            )
        } else {
            (
                0.0,
                "refine: a short linear anneal on the filtered data, then the single holdout evaluation",
            )
        };
        self.decide(Decision::new(
            self.state.step,
            phase,
            &format!("enter_{phase}"),
            format!(
                "{purpose}; {steps} steps, LR {unscaled:.2e} → {lr_end:.2e}, batch {batch}, dropout × {}",
                self.recipe.contract.dropout_scale
            ),
            json!({"steps": steps, "lr_start": unscaled, "lr_end": lr_end, "batch": batch, "val_loss": entry_val,
                   "prune": !self.recipe.contract.prune.is_empty() && phase == "contract",
                   "dropout": self.recipe.model.dropout * self.recipe.contract.dropout_scale,
                   "train_samples": self.rows.len()}),
        ))?;
        if phase == "contract" {
            self.prune_update()?;
        }
        self.checkpoint()?;
        Ok(())
    }

    /// Gradual magnitude pruning: moves every selected module to its scheduled sparsity (capped
    /// by attention's 20 % and diagnose's measurement; frozen modules hold), then records it.
    fn prune_update(&mut self) -> Result<()> {
        let c = &self.recipe.contract;
        if c.prune.is_empty() {
            return Ok(());
        }
        let ctl = &self.state.control;
        let k = self.state.step - ctl.phase_start;
        let progress = k as f64 / (c.prune_span * ctl.phase_steps as f64).max(1.0);
        let patterns: Vec<glob::Pattern> = c
            .prune
            .iter()
            .filter_map(|r| glob::Pattern::new(&r.params).ok())
            .collect();
        let cubic = c.prune_schedule == "cubic";
        let heads = c.prune_heads;
        let target = |path: &str| -> Option<Target> {
            let rule = &c.prune[patterns.iter().position(|g| g.matches(path))?];
            let module = module_of(path);
            if ctl.frozen.contains(&module) {
                let now = self.masks.sparsity(&module).unwrap_or(0.0);
                return Some(Target {
                    sparsity: now,
                    cap: now,
                });
            }
            // Single weights inside attention break heads: capped unless whole heads go.
            let attention = module.ends_with("attn");
            let single_cap = if attention && !heads { ATTENTION_CAP } else { 1.0 };
            Some(Target {
                sparsity: scheduled_sparsity(rule.init, rule.final_sparsity, progress, cubic),
                cap: ctl.caps.get(&module).copied().unwrap_or(1.0).min(single_cap),
            })
        };
        let scope = if c.prune_scope == "global" {
            Scope::Global
        } else {
            Scope::Module
        };
        let mut masks = self.masks.clone();
        update_all(
            &self.model,
            &mut masks,
            &target,
            scope,
            heads.then_some(self.recipe.model.heads),
        );
        self.masks = masks;
        self.model = apply_masks(self.model.clone(), &self.masks);
        self.record_sparsity()
    }

    /// A `metrics.jsonl` row of the overall and per-module sparsity at this step.
    fn record_sparsity(&mut self) -> Result<()> {
        let mut row = serde_json::Map::new();
        row.insert("step".into(), json!(self.state.step));
        row.insert("phase".into(), json!(self.state.phase));
        row.insert("sparsity".into(), json!(self.masks.overall()));
        for (m, s) in self.masks.by_module() {
            row.insert(format!("sparsity/{m}"), json!(s));
        }
        self.metrics.write(&serde_json::Value::Object(row))?;
        Ok(())
    }

    /// Ranks the training samples by their loss under the current model and drops the top share.
    fn drop_noisiest(&mut self) -> Result<()> {
        let losses = crate::diagnose::per_sample_losses(
            &self.model.valid(),
            &self.train_set,
            self.eval_batch(),
            &self.plain,
        );
        let c = &self.recipe.contract;
        let (share, floor) = (c.drop_noisiest, c.noisy_loss);
        let mut order: Vec<usize> = (0..losses.len()).collect();
        order.sort_by(|&a, &b| losses[b].total_cmp(&losses[a]).then(a.cmp(&b)));
        // At most the share, and only samples the model gives their label poor odds: on clean,
        // well-fitted data the top 2 % by loss are hard examples, not noise.
        let n = order
            .iter()
            .take(((losses.len() as f64) * share).round() as usize)
            .take_while(|&&i| f64::from(losses[i]) > floor)
            .count();
        let mut dropped: Vec<usize> = order[..n].to_vec();
        dropped.sort_unstable();
        let ids: Vec<&str> = dropped.iter().map(|&i| self.train_ids[i].as_str()).collect();
        let cutoff = n.checked_sub(1).map(|k| losses[order[k]]);
        let above = losses.iter().filter(|l| f64::from(**l) > floor).count();
        let reason = format!(
            "dropped the {n} training samples ({:.1} %, at most {:.1} %) with the highest loss, all above {floor:.3} ({above} samples are), from contract and refine",
            100.0 * n as f64 / losses.len().max(1) as f64,
            100.0 * share
        );
        self.decide(Decision::new(
            self.state.step,
            &self.state.phase.clone(),
            "drop_noisiest",
            reason,
            json!({"count": n, "share": share, "noisy_loss": floor, "above_floor": above,
                   "loss_cutoff": cutoff, "ids": ids}),
        ))?;
        self.state.control.dropped = dropped;
        self.state.control.noisy_checked = true;
        Ok(())
    }

    /// The doctor's reading of main and the per-module pruning sensitivity, recorded as caps.
    fn diagnose(&mut self) -> Result<()> {
        let step = self.state.step;
        let mut doctor = self.doctor.clone();
        doctor.finish();
        let findings: Vec<serde_json::Value> = doctor
            .findings()
            .iter()
            .map(|f| json!({"label": f.label.as_str(), "severity": f.severity.to_string(), "evidence": f.evidence, "recommendation": f.recommendation}))
            .collect();
        let labels: Vec<&str> = doctor.findings().iter().map(|f| f.label.as_str()).collect();
        self.decide(Decision::new(
            step,
            "diagnose",
            "doctor",
            format!("the doctor on main: {}", labels.join(", ")),
            json!({"findings": findings}),
        ))?;
        let valid = self.model.valid();
        let (base, acc) = evaluate(&valid, &self.val_set, self.eval_batch(), &self.plain);
        self.metrics.write(&EvalRow {
            step,
            phase: "diagnose",
            val_loss: base,
            val_accuracy: acc,
        })?;
        let sens = crate::diagnose::sensitivity(&valid, &self.val_set, self.eval_batch(), &self.plain, base);
        let tolerance = self.recipe.contract.tolerance;
        let alone = crate::diagnose::caps(&sens, tolerance);
        let planned = alone
            .iter()
            .map(|(m, c)| (m.clone(), c.min(self.planned_sparsity(m))))
            .collect();
        let (caps, joint) = crate::diagnose::joint_caps(
            &valid,
            &self.val_set,
            planned,
            tolerance,
            (self.eval_batch(), &self.plain, base),
        );
        let table: Vec<String> = caps
            .iter()
            .map(|(m, c)| format!("{m} {:.0} %", 100.0 * c))
            .collect();
        let last = joint.last().map_or(0.0, |j| j.increase);
        self.decide(Decision::new(
            step,
            "diagnose",
            "sensitivity",
            format!("one-shot magnitude pruning per module (10/20/30/50 % on a copy), then the planned sparsities all at once (+{:.1} % validation loss after {} check(s)): caps within {:.0} %: {}", 100.0 * last, joint.len(), 100.0 * tolerance, table.join(", ")),
            json!({"base_val_loss": base, "sensitivity": sens, "caps_alone": alone, "joint": joint, "caps": caps}),
        ))?;
        self.state.control.caps = caps;
        Ok(())
    }

    /// The sparsity a module reaches at the end of contraction by the recipe's rules alone: its
    /// rule's `final`, attention within [`ATTENTION_CAP`] unless whole heads are pruned.
    fn planned_sparsity(&self, module: &str) -> f64 {
        let c = &self.recipe.contract;
        let attention = module.ends_with("attn");
        let probe = format!("{module}.{}.weight", if attention { "query" } else { "up" });
        let rule = c
            .prune
            .iter()
            .find(|r| glob::Pattern::new(&r.params).is_ok_and(|g| g.matches(&probe)));
        let fin = rule.map_or(0.0, |r| r.final_sparsity);
        if attention && !c.prune_heads {
            fin.min(ATTENTION_CAP)
        } else {
            fin
        }
    }

    /// The holdout, read once, and the final weights.
    fn finish(&mut self) -> Result<FinalEval> {
        let fin = self.run.join("final");
        let eval_path = fin.join("eval.json");
        let eval = if eval_path.is_file() {
            let bytes = std::fs::read(&eval_path).map_err(|e| TrainError::io(&eval_path, e))?;
            self.log
                .info(&format!("{} is already complete", self.run.display()));
            serde_json::from_slice(&bytes).map_err(|e| TrainError::Corrupt {
                path: eval_path.clone(),
                message: e.to_string(),
            })?
        } else {
            self.final_eval(&fin)?
        };
        let phase = self.recipe.run.phases.last().cloned().unwrap_or_default();
        if let Some(q) = &eval.int8 {
            let (kind, what) = if q.kept {
                ("int8", format!("kept as final/{INT8_MODEL}"))
            } else {
                ("refuse_int8", "refused: the model stays f32".to_string())
            };
            self.decide(Decision::new(
                eval.step,
                &phase,
                kind,
                format!(
                    "int8 ({}): validation accuracy {:.2} % → {:.2} % ({:+.2} points, limit −{} points), {} → {} bytes ({:.1}x smaller); {what}",
                    scheme_text(self.int8_block()),
                    100.0 * eval.val_accuracy,
                    100.0 * q.val_accuracy,
                    -q.drop_points,
                    self.recipe.refine.max_drop,
                    q.dense_bytes,
                    q.bytes,
                    q.dense_bytes as f64 / q.bytes.max(1) as f64
                ),
                serde_json::to_value(q).unwrap_or_default(),
            ))?;
        }
        self.decide(Decision::new(
            eval.step,
            &phase,
            "holdout",
            format!(
                "the holdout, read once: accuracy {:.2} %, loss {:.4} on {} samples",
                100.0 * eval.holdout_accuracy,
                eval.holdout_loss,
                eval.holdout_samples
            ),
            json!({"holdout_accuracy": eval.holdout_accuracy, "holdout_loss": eval.holdout_loss,
                   "samples": eval.holdout_samples}),
        ))?;
        self.decisions.sync()?;
        trainer::write_json(&eval_path, &eval)?;
        Ok(eval)
    }

    /// Writes the final weights (and the int8 model and the student, when asked), then evaluates
    /// validation and the holdout (its one read), and writes the model card.
    fn final_eval(&mut self, fin: &std::path::Path) -> Result<FinalEval> {
        std::fs::create_dir_all(fin).map_err(|e| TrainError::io(fin, e))?;
        let valid = self.model.valid();
        let x = self.setup_extras.clone();
        trainer::save_safetensors(&valid, &fin.join("model.safetensors"))?;
        x.encoder.save(&fin.join(Encoder::file_name(&self.recipe)))?;
        trainer::write_json(&fin.join("classes.json"), &x.classes)?;
        let eb = self.eval_batch();
        let (val_loss, val_accuracy) = evaluate(&valid, &self.val_set, eb, &self.plain);
        let refine = self.recipe.run.has_phase("refine");
        let quantized = (self.recipe.refine.quantize == "int8" && refine)
            .then(|| quantize_int8(valid.clone(), self.int8_block()));
        let student = match self.recipe.refine.distill.enabled && refine {
            true => Some(self.distill(fin, &valid)?),
            false => None,
        };
        let holdout = self.holdout.read_once()?;
        if self.holdout.reads() > 1 {
            self.log.warn(&format!(
                "the holdout was read {} times: an earlier session of this run read it and did not finish; the same final model is evaluated again (nothing was chosen on the earlier read)",
                self.holdout.reads()
            ));
        }
        let hold = Encoded::new(&holdout, &x.encoder, &x.classes, "holdout")?;
        let size = |f: &str| std::fs::metadata(fin.join(f)).map_or(0, |m| m.len());
        // Validation was evaluated above (its loss is reported too): only the holdout is new here.
        let (holdout_loss, holdout_accuracy) = evaluate(&valid, &hold, eb, &self.plain);
        let dense = Measured {
            val_accuracy,
            holdout: (holdout_loss, holdout_accuracy),
            bytes: size("model.safetensors"),
        };
        let mut variants = vec![Variant::new(
            "f32",
            Some("final/model.safetensors".into()),
            &valid,
            dense,
            "the refined model, masks applied".into(),
        )];
        let mut models = vec![&valid];
        let int8 = match &quantized {
            Some(q) => {
                models.push(q);
                Some(self.int8(fin, &valid, q, val_accuracy, &hold, &mut variants)?)
            }
            None => None,
        };
        if let Some(fitted) = &student {
            variants.push(Variant::new(
                "student",
                Some(format!("final/{STUDENT_MODEL}")),
                &fitted.model,
                Measured::of(&fitted.model, &self.val_set, &hold, eb, size(STUDENT_MODEL)),
                student_note(&self.recipe.refine.distill, &self.recipe.model.kind, fitted),
            ));
            models.push(&fitted.model);
        }
        time_variants(&mut variants, &models, &self.val_set);
        let card = json!({
            "model": self.recipe.model,
            "classes": x.classes.names,
            "parameters": valid.num_params(),
            "sparsity": self.masks.by_module(),
            "latency_batch": LATENCY_BATCH,
            "variants": variants,
        });
        trainer::write_json(&fin.join("model-card.json"), &card)?;
        Ok(FinalEval {
            int8,
            student: variants.iter().find(|v| v.name == "student").cloned(),
            step: self.state.step,
            classes: x.classes.names.clone(),
            holdout_samples: hold.len(),
            holdout_loss,
            holdout_accuracy,
            val_loss,
            val_accuracy,
            best: self.state.best,
            holdout_reads: self.holdout.reads(),
            main_end: self.state.control.main_end.clone(),
            sparsity: self.masks.by_module(),
            planned_steps: self.steps.validate + self.steps.main + self.steps.contract + self.steps.refine,
        })
    }

    /// Measures the int8 model and keeps it in `fin` when it costs at most `refine.max_drop`
    /// validation points.
    fn int8(
        &self,
        fin: &std::path::Path,
        dense: &Classifier,
        q: &Classifier,
        val_accuracy: f32,
        hold: &Encoded,
        variants: &mut Vec<Variant>,
    ) -> Result<Int8Eval> {
        let bytes = record_bytes(q)?;
        let m = Measured::of(q, &self.val_set, hold, self.eval_batch(), bytes.len() as u64);
        let (q_val, q_hold) = (m.val_accuracy, m.holdout.1);
        let drop_points = 100.0 * f64::from(val_accuracy - q_val);
        let kept = drop_points <= self.recipe.refine.max_drop;
        if kept {
            contrai_data::write::write_atomic(fin.join(INT8_MODEL), &bytes)?;
        }
        let e = Int8Eval {
            kept,
            val_accuracy: q_val,
            holdout_accuracy: q_hold,
            drop_points,
            bytes: bytes.len() as u64,
            dense_bytes: record_bytes(dense)?.len() as u64,
        };
        let (file, note) = match kept {
            true => (
                Some(format!("final/{INT8_MODEL}")),
                scheme_text(self.int8_block()),
            ),
            false => (
                None,
                format!(
                    "refused: {drop_points:.2} validation points lost (limit {})",
                    self.recipe.refine.max_drop
                ),
            ),
        };
        variants.push(Variant::new("int8", file, q, m, note));
        Ok(e)
    }

    /// Distils the refined model into the recipe's student on the filtered training data;
    /// writes `final/student.safetensors` and its log `final/student-metrics.jsonl`.
    fn distill(&mut self, fin: &std::path::Path, teacher: &Classifier) -> Result<Fitted> {
        let d = self.recipe.refine.distill.clone();
        let rows = self.rows_kept();
        let data = FitData {
            train: &self.train_set,
            rows: &rows,
            val: &self.val_set,
            eval_batch: self.eval_batch(),
        };
        self.say(&format!(
            "distilling into a student ({}) for {} steps: loss = {} · CE + {} · T² · KL, T = {}",
            student_size(&d, &self.recipe.model.kind),
            d.steps,
            d.w_ce,
            d.w_kd,
            d.temperature
        ));
        let mut on_step = crate::distill::log_evaluations(self.log);
        let fitted = crate::distill::distill(
            teacher,
            &self.recipe.model,
            &d,
            &data,
            trainer::optimizer(&self.recipe),
            (self.recipe.run.seed, self.recipe.main.clip_norm),
            &mut on_step,
        )?;
        let mut lines = Vec::new();
        for r in &fitted.rows {
            lines.extend(serde_json::to_vec(r).map_err(|e| record_err(fin, e))?);
            lines.push(b'\n');
        }
        contrai_data::write::write_atomic(fin.join("student-metrics.jsonl"), &lines)?;
        trainer::save_safetensors(&fitted.model, &fin.join(STUDENT_MODEL))?;
        let (step, vl, va) = fitted.best;
        let phase = self.state.phase.clone();
        self.decide(Decision::new(
            self.state.step,
            if phase == "done" { "refine" } else { &phase },
            "distill",
            format!(
                "student distilled from the refined model: {} parameters (teacher {}), best validation at its step {step}: loss {vl:.4}, accuracy {:.2} %; kept as final/{STUDENT_MODEL}",
                fitted.model.num_params(),
                teacher.num_params(),
                100.0 * va
            ),
            json!({"parameters": fitted.model.num_params(), "teacher_parameters": teacher.num_params(),
                   "best_step": step, "val_loss": vl, "val_accuracy": va, "steps": d.steps,
                   "temperature": d.temperature, "w_ce": d.w_ce, "w_kd": d.w_kd}),
        ))?;
        Ok(fitted)
    }

    // ---- plumbing -----------------------------------------------------------------------------

    /// Writes a checkpoint of the current step (keeping the last K and the best).
    fn checkpoint(&mut self) -> Result<PathBuf> {
        let t = Instant::now();
        let root = self.run.join("checkpoints");
        if let Some(vl) = self.state.val_loss
            && self.state.best.is_none_or(|(_, b)| vl < b)
            && self.state.phase != "validate"
        {
            self.state.best = Some((self.state.step, vl));
        }
        self.metrics.sync()?;
        self.decisions.sync()?;
        self.state.metrics_len = self.metrics.len();
        self.state.decisions_len = self.decisions.len();
        let (model, optim) = self.snapshot(&root)?;
        let masks = if self.masks.is_empty() {
            Vec::new()
        } else {
            serde_json::to_vec(&self.masks).map_err(|e| record_err(&root, e))?
        };
        let extra: &[(&str, &[u8])] = if masks.is_empty() { &[] } else { &[(MASKS, &masks)] };
        let dir = checkpoint::save(&root, &self.state, &model, &optim, extra)?;
        let keep: Vec<u64> = [self.state.best, self.state.control.contract_best]
            .into_iter()
            .flatten()
            .map(|b| b.0)
            .collect();
        checkpoint::prune(&root, self.recipe.run.keep_last as usize, &keep)?;
        self.timing.checkpoint_s += t.elapsed().as_secs_f64();
        self.timing.checkpoints += 1;
        Ok(dir)
    }

    /// The model's and the optimizer's records as bytes (`path` names them in errors).
    fn snapshot(&self, path: &std::path::Path) -> Result<(Vec<u8>, Vec<u8>)> {
        let optim = self.optim.into_bytes().map_err(|e| record_err(path, e))?;
        Ok((record_bytes(&self.model)?, optim.to_vec()))
    }

    /// Writes a decision to `decisions.jsonl` and the console.
    fn decide(&mut self, d: Decision) -> Result<()> {
        self.say(&format!("[{} step {}] {}: {}", d.phase, d.step, d.kind, d.reason));
        self.decisions.write(&d)?;
        Ok(())
    }

    /// The batcher of the current phase over the rows it trains on, at the state's cursor.
    fn rebuild_batcher(&mut self) -> Result<()> {
        self.rows = match self.state.phase.as_str() {
            "contract" | "refine" => self.rows_kept(),
            _ => (0..self.train_set.len()).collect(),
        };
        let salt = match self.state.phase.as_str() {
            "contract" => 0xC0,
            "refine" => 0x7E,
            _ => 0,
        };
        self.batcher = Batcher::new(
            self.rows.len(),
            self.batcher_batch(),
            self.recipe.run.seed ^ salt,
            self.state.cursor,
        )?;
        Ok(())
    }

    /// The training rows the noisy-sample filter kept (all before it ran).
    fn rows_kept(&self) -> Vec<usize> {
        let dropped = &self.state.control.dropped;
        (0..self.train_set.len())
            .filter(|i| dropped.binary_search(i).is_err())
            .collect()
    }

    fn batcher_batch(&self) -> usize {
        match self.state.phase.as_str() {
            "contract" | "refine" => self.recipe.contract.batch,
            _ => self.recipe.main.batch,
        }
    }

    fn int8_block(&self) -> Option<u8> {
        Some(self.recipe.refine.quantize_block).filter(|b| *b > 0)
    }

    fn eval_batch(&self) -> usize {
        trainer::eval_batch(&self.recipe)
    }

    fn start_bar(&mut self) {
        let total = self.steps.validate + self.steps.main + self.steps.contract + self.steps.refine;
        if self.opts.progress_bar && std::io::stderr().is_terminal() && self.state.step < total {
            let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  ETA {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.set_position(self.state.step);
            self.bar = b;
        }
    }

    fn say(&self, msg: &str) {
        if self.bar.is_hidden() {
            self.log.info(msg)
        } else {
            self.bar.println(msg)
        }
    }

    fn outcome(&self, finished: bool) -> Outcome {
        let t = &self.timing;
        Outcome {
            run_dir: self.run.clone(),
            step: self.state.step,
            finished,
            resumed_from: self.resumed_from,
            eval: None,
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
        }
    }
}
