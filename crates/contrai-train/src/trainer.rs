//! Contrai's training loop: AdamW, the recipe's LR schedule, gradient accumulation, global-norm
//! clipping, evaluation, step checkpoints with exact resume, and the holdout read once at the end.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{AdamWConfig, GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::store::ModuleRecord;
use burn::tensor::{Bytes, Device, Tensor};
use contrai_data::Progress;
use contrai_recipe::plan::main_schedule;
use contrai_recipe::{Recipe, Schedule};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::batch::{Batcher, Classes, Cursor, Encoded};
use crate::checkpoint::{self, RngState, State};
use crate::data::{self, Samples};
use crate::dropout::Dropout;
use crate::error::{Result, TrainError};
use crate::metrics::{EvalRow, Metrics, TrainRow};
use crate::model::{TextBatch, TextClassifier, cross_entropy};
use crate::plan::RunPlan;
use crate::tokenizer::Tokenizer;

/// Where messages go (the CLI prints them; tests collect them).
pub trait Log {
    /// A progress line.
    fn info(&self, msg: &str);
    /// Something the user should know (a skipped checkpoint ...).
    fn warn(&self, msg: &str);
}

/// Prints to stderr.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stderr;

impl Log for Stderr {
    fn info(&self, msg: &str) {
        eprintln!("{msg}");
    }
    fn warn(&self, msg: &str) {
        eprintln!("warning: {msg}");
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The recipe (on `resume`, the run directory's own `recipe.toml` wins).
    pub recipe: Recipe,
    /// The run directory.
    pub run_dir: PathBuf,
    /// Continue from the newest valid checkpoint.
    pub resume: bool,
    /// Stop once this many steps are done (a planned interruption; resume continues).
    pub stop_after: Option<u64>,
    /// Draw a progress bar on stderr (hidden anyway when stderr is not a terminal).
    pub progress_bar: bool,
}

impl Options {
    /// Options for a fresh run of `recipe` in `run_dir`.
    pub fn new(recipe: Recipe, run_dir: impl Into<PathBuf>) -> Options {
        Options {
            recipe,
            run_dir: run_dir.into(),
            resume: false,
            stop_after: None,
            progress_bar: false,
        }
    }
}

/// `final/eval.json`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct FinalEval {
    /// Steps trained.
    pub step: u64,
    /// Class names in index order.
    pub classes: Vec<String>,
    /// Holdout samples.
    pub holdout_samples: usize,
    /// Mean holdout loss.
    pub holdout_loss: f32,
    /// Holdout accuracy in [0, 1].
    pub holdout_accuracy: f32,
    /// Final validation loss.
    pub val_loss: f32,
    /// Final validation accuracy.
    pub val_accuracy: f32,
    /// The best checkpoint's step and validation loss.
    pub best: Option<(u64, f32)>,
    /// Times the holdout was read (always 1).
    pub holdout_reads: usize,
}

/// What a call to [`train`] did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Steps done.
    pub step: u64,
    /// Whether the phase finished (false after `stop_after`).
    pub finished: bool,
    /// The step resumed from, if any.
    pub resumed_from: Option<u64>,
    /// The final evaluation, when finished.
    pub eval: Option<FinalEval>,
    /// Mean milliseconds an optimizer step took in this session (evaluation and checkpoints aside).
    pub ms_per_step: f64,
    /// Mean milliseconds a checkpoint took to write in this session (0 when none was written).
    pub ms_per_checkpoint: f64,
    /// Effective batch.
    pub effective_batch: usize,
}

/// Mean loss and accuracy of `model` on `data`, in batches of `batch`.
pub fn evaluate(model: &TextClassifier, data: &Encoded, batch: usize, device: &Device) -> (f32, f32) {
    if data.is_empty() {
        return (f32::NAN, f32::NAN);
    }
    let mut loss = 0f64;
    let mut correct = 0i64;
    let rows: Vec<usize> = (0..data.len()).collect();
    for chunk in rows.chunks(batch.max(1)) {
        let (ids, labels) = data.gather(chunk);
        let b = TextBatch::new(&ids, &labels, data.seq, device);
        let logits = model.forward(&b, None);
        let pred = logits.clone().argmax(1).reshape([chunk.len()]);
        correct += pred.equal(b.labels.clone()).int().sum().into_scalar::<i64>();
        loss += f64::from(cross_entropy(logits, b.labels).into_scalar::<f32>()) * chunk.len() as f64;
    }
    (
        (loss / data.len() as f64) as f32,
        correct as f32 / data.len() as f32,
    )
}

struct SqNorm<'a> {
    grads: &'a GradientsParams,
    parts: Vec<Tensor<1>>,
}

impl ModuleVisitor for SqNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            self.parts.push(g.square().sum());
        }
    }
}

struct Scale<'a> {
    grads: &'a mut GradientsParams,
    factor: f64,
}

impl ModuleVisitor for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(param.id) {
            self.grads.register(param.id, g.mul_scalar(self.factor));
        }
    }
}

/// The global L2 norm of the gradients of `model`'s parameters.
pub fn grad_norm<M: Module>(model: &M, grads: &GradientsParams) -> f32 {
    let mut v = SqNorm {
        grads,
        parts: Vec::new(),
    };
    model.visit(&mut v);
    if v.parts.is_empty() {
        return 0.0;
    }
    Tensor::cat(v.parts, 0).sum().into_scalar::<f32>().sqrt()
}

/// Scales every gradient by `factor`.
pub fn scale_grads<M: Module>(model: &M, grads: &mut GradientsParams, factor: f64) {
    model.visit(&mut Scale { grads, factor });
}

/// One optimizer step's gradients: `accumulate` micro-batches, each loss scaled so the sum is
/// the mean over the effective batch. Returns the gradients and the mean loss.
pub fn step_grads(
    model: &TextClassifier,
    batches: &[TextBatch],
    drops: &[Option<Dropout>],
) -> (GradientsParams, f32) {
    let total: usize = batches.iter().map(TextBatch::len).sum();
    let mut acc = GradientsAccumulator::<TextClassifier>::new();
    let mut single = None;
    let mut loss_sum = 0f64;
    for (b, d) in batches.iter().zip(drops) {
        let logits = model.forward(b, d.as_ref());
        let loss = cross_entropy(logits, b.labels.clone());
        let w = b.len() as f64 / total as f64;
        let scaled = loss.mul_scalar(w);
        let grads = GradientsParams::from_grads(scaled.backward(), model);
        loss_sum += f64::from(scaled.into_scalar::<f32>());
        if batches.len() == 1 {
            single = Some(grads);
        } else {
            acc.accumulate(model, grads);
        }
    }
    (single.unwrap_or_else(|| acc.grads()), loss_sum as f32)
}

/// The AdamW optimizer of a recipe.
pub fn optimizer(recipe: &Recipe) -> ModuleOptimizer {
    AdamWConfig::new()
        .with_weight_decay(recipe.main.weight_decay as f32)
        .with_epsilon(1e-8)
        .init()
}

fn check(recipe: &Recipe) -> Result<()> {
    recipe
        .validate()
        .map_err(|(k, m)| TrainError::Unsupported(format!("`{k}` {m}")))?;
    if recipe.model.kind != "transformer" {
        return Err(TrainError::Unsupported(format!(
            "model.kind = \"{}\": `contrai train` trains the text transformer; the MLP for numeric \
             features exists as a model but the data stage reads text only",
            recipe.model.kind
        )));
    }
    if recipe.main.devices != 1 {
        return Err(TrainError::Unsupported(format!(
            "main.devices = {}: data-parallel training is not available yet on the CPU backend; use 1",
            recipe.main.devices
        )));
    }
    Ok(())
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(v).map_err(|e| TrainError::Corrupt {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    contrai_data::write::write_atomic(path, &bytes)?;
    Ok(())
}

fn record_err(path: &Path, e: impl std::fmt::Display) -> TrainError {
    TrainError::Record {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Runs (or resumes) the main phase of `opts.recipe` in `opts.run_dir`.
pub fn train(opts: &Options, data_progress: &dyn Progress, log: &dyn Log) -> Result<Outcome> {
    let run = &opts.run_dir;
    let recipe_path = run.join("recipe.toml");
    let metrics_path = run.join("metrics.jsonl");
    let started = metrics_path.exists() || run.join("checkpoints").exists();
    if started && !opts.resume {
        return Err(TrainError::Exists { path: run.clone() });
    }
    let recipe = if opts.resume && recipe_path.is_file() {
        let stored = Recipe::from_file(&recipe_path).map_err(|e| TrainError::Unsupported(e.to_string()))?;
        if stored != opts.recipe {
            log.warn(&format!(
                "resuming with the run's own {} (it differs from the recipe given)",
                recipe_path.display()
            ));
        }
        stored
    } else {
        opts.recipe.clone()
    };
    check(&recipe)?;
    std::fs::create_dir_all(run).map_err(|e| TrainError::io(run, e))?;
    // A resumed run reuses everything its first session wrote; a fresh one rewrites it all.
    let reuse = opts.resume && recipe_path.is_file();
    if !reuse {
        contrai_data::write::write_atomic(&recipe_path, recipe.to_toml().as_bytes())?;
    }

    // Data: split (or reuse), tokenizer fitted on train only.
    let mut prepared = data::prepare(&recipe, run, data_progress, reuse)?;
    let tok_path = run.join("tokenizer.json");
    let tok = if reuse && tok_path.is_file() {
        Tokenizer::load(&tok_path)?
    } else {
        let t = Tokenizer::fit(
            prepared.train.texts.iter().map(String::as_str),
            recipe.model.vocab,
        )?;
        t.save(&tok_path)?;
        t
    };
    let classes_path = run.join("classes.json");
    let classes = if reuse && classes_path.is_file() {
        let bytes = std::fs::read(&classes_path).map_err(|e| TrainError::io(&classes_path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| TrainError::Corrupt {
            path: classes_path.clone(),
            message: e.to_string(),
        })?
    } else {
        let c = Classes::from_labels(&prepared.train.labels);
        write_json(&classes_path, &c)?;
        c
    };
    let seq = recipe.model.seq_len;
    let train_set = Encoded::new(&prepared.train, &tok, &classes, seq, "train")?;
    let val_set = Encoded::new(&prepared.val, &tok, &classes, seq, "val")?;
    prepared.train = Samples::default();
    prepared.val = Samples::default();

    let plan = RunPlan::new(&recipe, train_set.len() as u64);
    write_json(&run.join("plan.json"), &plan)?;
    let schedule: Schedule = main_schedule(&recipe);
    let m = &recipe.main;
    let eff = m.effective_batch();
    log.info(&format!(
        "data: {} train / {} val samples, {} classes; tokenizer: {} ids ({} words) fitted on train",
        train_set.len(),
        val_set.len(),
        classes.names.len(),
        tok.size,
        tok.words.len()
    ));
    log.info(&format!(
        "effective batch {eff} = batch {} x devices {} x accumulate {}; {} steps, warmup {}, {:?} to {:e}",
        m.batch, m.devices, m.accumulate, m.steps, schedule.warmup, schedule.decay, m.min_lr
    ));

    // Model and optimizer, fresh or from the newest valid checkpoint.
    crate::alloc::keep_freed_memory();
    let device = Device::flex().autodiff();
    let plain = Device::flex();
    let seed = recipe.run.seed;
    let mut model = TextClassifier::new(&recipe.model, classes.names.len(), seed, &device)?;
    let mut optim = optimizer(&recipe);
    let ck_root = run.join("checkpoints");
    let mut state = State {
        format: checkpoint::FORMAT,
        phase: "main".into(),
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
    };
    let mut resumed_from = None;
    if opts.resume {
        let loaded = checkpoint::load_latest(&ck_root, &mut |w| log.warn(&w))?;
        if let Some(l) = loaded {
            let rec = ModuleRecord::from_bytes(Bytes::from_bytes_vec(l.model))
                .map_err(|e| record_err(&l.dir, e))?;
            model = model.try_load_record(rec).map_err(|e| record_err(&l.dir, e))?;
            optim = optim
                .from_bytes(Bytes::from_bytes_vec(l.optimizer))
                .map_err(|e| record_err(&l.dir, e))?;
            log.info(&format!(
                "resuming from {} (step {})",
                l.dir.display(),
                l.state.step
            ));
            resumed_from = Some(l.state.step);
            state = l.state;
        } else if started {
            log.warn("no valid checkpoint to resume from; starting over");
        }
        checkpoint::discard_after(&ck_root, state.step)?;
    }
    let mut metrics = Metrics::open(&metrics_path, state.metrics_len)?;
    let mut batcher = Batcher::new(train_set.len(), m.batch, seed, state.cursor)?;

    let total = m.steps;
    let stop = opts.stop_after.unwrap_or(total).min(total);
    let bar = if opts.progress_bar && std::io::stderr().is_terminal() && state.step < stop {
        let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  ETA {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.set_position(state.step);
        b
    } else {
        ProgressBar::hidden()
    };
    let say = |msg: &str| {
        if bar.is_hidden() {
            log.info(msg)
        } else {
            bar.println(msg)
        }
    };

    let session = Instant::now();
    let base_wall = state.wall_s;
    let mut step_time = 0f64;
    let mut steps_here = 0u64;
    let (mut ckpt_time, mut ckpts_here) = (0f64, 0u32);
    let eval_batch = (m.batch * 2).max(32);
    let ckpt_steps = plan.checkpoint_steps.clone();
    while state.step < stop {
        let step = state.step;
        let t0 = Instant::now();
        let lr = schedule.lr(step);
        let mut batches = Vec::with_capacity(m.accumulate);
        let mut drops = Vec::with_capacity(m.accumulate);
        for micro in 0..m.accumulate {
            let (ids, labels) = train_set.gather(&batcher.next_batch());
            batches.push(TextBatch::new(&ids, &labels, seq, &device));
            drops.push(
                (recipe.model.dropout > 0.0)
                    .then(|| Dropout::new(recipe.model.dropout, seed, step, micro as u64)),
            );
        }
        let (mut grads, loss) = step_grads(&model, &batches, &drops);
        let norm = grad_norm(&model, &grads);
        if m.clip_norm > 0.0 && f64::from(norm) > m.clip_norm {
            scale_grads(&model, &mut grads, m.clip_norm / (f64::from(norm) + 1e-6));
        }
        model = optim.step(lr, model, grads);
        step_time += t0.elapsed().as_secs_f64();
        steps_here += 1;

        state.step += 1;
        state.samples += eff as u64;
        state.cursor = batcher.cursor;
        state.rng.next_step = state.step;
        state.lr = lr;
        let wall = base_wall + session.elapsed().as_secs_f64();
        state.wall_s = (wall * 1000.0).round() / 1000.0;
        metrics.write(&TrainRow {
            step: state.step,
            phase: "main",
            samples: state.samples,
            train_loss: loss,
            lr,
            grad_norm: norm,
            batch_size: eff,
            wall_s: (wall * 100.0).round() / 100.0,
        })?;
        bar.set_position(state.step);
        bar.set_message(format!("loss {loss:.4}  lr {lr:.2e}"));

        let last = state.step == total;
        if (recipe.run.eval_every > 0 && state.step.is_multiple_of(recipe.run.eval_every)) || last {
            let (vl, va) = evaluate(&model.valid(), &val_set, eval_batch, &plain);
            metrics.write(&EvalRow {
                step: state.step,
                phase: "main",
                val_loss: vl,
                val_accuracy: va,
            })?;
            state.val_loss = Some(vl);
            say(&format!(
                "step {:>6}/{total}  train_loss {loss:.4}  val_loss {vl:.4}  val_accuracy {:.2} %  lr {lr:.2e}",
                state.step,
                va * 100.0
            ));
        }
        if ckpt_steps.binary_search(&state.step).is_ok() {
            let t_ck = Instant::now();
            if let Some(vl) = state.val_loss
                && state.best.is_none_or(|(_, b)| vl < b)
            {
                state.best = Some((state.step, vl));
            }
            metrics.sync()?;
            state.metrics_len = metrics.len();
            let model_bytes = model
                .clone()
                .into_record()
                .into_bytes()
                .map_err(|e| record_err(&ck_root, e))?;
            let optim_bytes = optim.into_bytes().map_err(|e| record_err(&ck_root, e))?;
            checkpoint::save(&ck_root, &state, &model_bytes, &optim_bytes)?;
            checkpoint::prune(&ck_root, recipe.run.keep_last as usize, state.best.map(|b| b.0))?;
            ckpt_time += t_ck.elapsed().as_secs_f64();
            ckpts_here += 1;
        }
    }
    bar.finish_and_clear();
    let ms_per_step = if steps_here > 0 {
        step_time * 1000.0 / steps_here as f64
    } else {
        0.0
    };
    let mut outcome = Outcome {
        run_dir: run.clone(),
        step: state.step,
        finished: state.step >= total,
        resumed_from,
        eval: None,
        ms_per_step,
        ms_per_checkpoint: if ckpts_here > 0 {
            ckpt_time * 1000.0 / f64::from(ckpts_here)
        } else {
            0.0
        },
        effective_batch: eff,
    };
    if !outcome.finished {
        return Ok(outcome);
    }

    // The end: final weights, then the holdout, read once.
    let fin = run.join("final");
    let eval_path = fin.join("eval.json");
    if eval_path.is_file() {
        let bytes = std::fs::read(&eval_path).map_err(|e| TrainError::io(&eval_path, e))?;
        outcome.eval = serde_json::from_slice(&bytes).ok();
        log.info(&format!("{} is already complete", run.display()));
        return Ok(outcome);
    }
    std::fs::create_dir_all(&fin).map_err(|e| TrainError::io(&fin, e))?;
    let valid = model.valid();
    save_safetensors(&valid, &fin.join("model.safetensors"))?;
    tok.save(&fin.join("tokenizer.json"))?;
    write_json(&fin.join("classes.json"), &classes)?;
    let (val_loss, val_accuracy) = evaluate(&valid, &val_set, eval_batch, &plain);
    let holdout = prepared.holdout.read_once()?;
    let hold = Encoded::new(&holdout, &tok, &classes, seq, "holdout")?;
    let (holdout_loss, holdout_accuracy) = evaluate(&valid, &hold, eval_batch, &plain);
    let eval = FinalEval {
        step: state.step,
        classes: classes.names.clone(),
        holdout_samples: hold.len(),
        holdout_loss,
        holdout_accuracy,
        val_loss,
        val_accuracy,
        best: state.best,
        holdout_reads: prepared.holdout.reads(),
    };
    write_json(&eval_path, &eval)?;
    outcome.eval = Some(eval);
    Ok(outcome)
}

/// Writes the model's weights as safetensors, atomically.
pub fn save_safetensors(model: &TextClassifier, path: &Path) -> Result<()> {
    use burn::store::{ModuleSnapshot, SafetensorsStore};
    let mut store = SafetensorsStore::from_bytes(None);
    model.save_into(&mut store).map_err(|e| record_err(path, e))?;
    let bytes = store.get_bytes().map_err(|e| record_err(path, e))?;
    contrai_data::write::write_atomic(path, &bytes)?;
    Ok(())
}
