//! `contrai compress RUN_DIR`: pruning, int8 quantization and distillation of an existing run's
//! best checkpoint, without retraining from scratch. Each variant is made from the same source
//! model, measured side by side and written to `RUN_DIR/compress/`.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;
use contrai_data::Silent;
use contrai_recipe::{Decay, Recipe, Schedule};
use serde::Serialize;

use crate::batch::{Classes, Encoded, Encoder};
use crate::checkpoint::{self, Loaded};
use crate::distill::{Fit, FitData, Fitted, distill, fit, log_evaluations, student_note, student_size};
use crate::dropout::Dropout;
use crate::error::{Result, TrainError};
use crate::evaluate::eval_batch;
use crate::export::{LATENCY_BATCH, Measured, save_safetensors, time_variants, variant};
use crate::model::{Batch, Classifier, cross_entropy};
use crate::options::Log;
use crate::prune::{Masks, Structure, apply_masks, update_all};
use crate::quantize::{quantize_int8, record_bytes, scheme_text};
use crate::step::optimizer;
use contrai_lifecycle::Target;
use contrai_lifecycle::prune_policy::PruneRules;
use contrai_recipe::PruneScope;
use contrai_run::Variant;

/// What to make.
#[derive(Debug, Clone)]
pub struct CompressOptions {
    /// Prune this share of the prunable weights (the recipe's `contract.prune` globs).
    pub prune: Option<f64>,
    /// One magnitude threshold over all prunable weights, or one per module.
    pub scope: PruneScope,
    /// Prune attention by whole heads.
    pub heads: bool,
    /// Prune feed-forward layers by whole units.
    pub units: bool,
    /// Fine-tuning steps after pruning (masks held), at `lr` decaying linearly to 0.
    pub steps: u64,
    /// Peak LR of the fine-tuning (default: main.lr / 10).
    pub lr: Option<f64>,
    /// Quantize the weights to int8.
    pub int8: bool,
    /// Int8 with a scale every N weights of a row instead of one a matrix.
    pub int8_block: Option<u8>,
    /// Distil into the recipe's `[refine.distill]` student.
    pub distill: bool,
    /// Use this checkpoint step instead of the run's best.
    pub step: Option<u64>,
}

impl CompressOptions {
    /// What is pruned whole: heads of the recipe's count, feed-forward units.
    fn structure(&self, recipe: &Recipe) -> Structure {
        Structure::new(self.heads.then_some(recipe.model.heads), self.units)
    }
}

/// `compress/compress.json`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct CompressReport {
    /// The run directory.
    pub run: PathBuf,
    /// The checkpoint step the variants were made from.
    pub source_step: u64,
    /// Prunable weight-matrix entries (the share `prune` applies to).
    pub prunable_entries: usize,
    /// Samples of the holdout each variant was measured on.
    pub holdout_samples: usize,
    /// Samples a batch of the latency column.
    pub latency_batch: usize,
    /// The source model and each variant.
    pub variants: Vec<Variant>,
}

/// Everything a compression works from: the recipe, the encoded partitions, the source model.
struct Source {
    recipe: Recipe,
    train: Encoded,
    val: Encoded,
    hold: Encoded,
    model: Classifier,
    masks: Masks,
    step: u64,
    rows: Vec<usize>,
}

/// Makes the variants `opts` asks for from `run`'s best checkpoint and measures them.
pub fn compress(run: &Path, opts: &CompressOptions, log: &dyn Log) -> Result<CompressReport> {
    crate::process::setup();
    // One writer per run: not while it trains, not two at once (a missing run is `open`'s error).
    let lock = run
        .is_dir()
        .then(|| contrai_base::DirLock::acquire(run))
        .transpose()?;
    for f in lock.iter().flat_map(|l| l.removed()) {
        log.warn(&contrai_base::lock::removed_note(f));
    }
    let src = open(run, opts.step, log)?;
    let mlp = matches!(src.model, Classifier::Mlp(_));
    if mlp && (opts.heads || opts.units) {
        let flag = if opts.heads {
            "--heads prunes attention heads"
        } else {
            "--units prunes feed-forward units"
        };
        return Err(TrainError::Unsupported(format!(
            "{flag} of a transformer; {} is an MLP run, which has none",
            run.display()
        )));
    }
    let mut shelf = Shelf::new(&src, run.join("compress"))?;
    let dense = src.model.valid();
    let note = format!("checkpoint step {}", src.step);
    shelf.safetensors("dense", "source.safetensors", dense.clone(), note)?;
    let prunable = prunable_paths(&src.recipe);
    let entries: usize = crate::prune::weights(&dense, &|p| prunable(p))
        .iter()
        .map(|m| m.2.len())
        .sum();
    let pruned = match opts.prune {
        Some(share) => {
            log.info(&format!(
                "pruning {:.0} % of {entries} prunable weights, then {} fine-tuning steps",
                100.0 * share,
                opts.steps
            ));
            let (m, note) = prune_and_tune(&src, opts, share, log)?;
            let (m, removed) = crate::compact::compact(m, opts.structure(&src.recipe));
            let note = match removed.note() {
                Some(r) => format!("{note}; {r}"),
                None => note,
            };
            shelf.safetensors("pruned", "pruned.safetensors", m.clone(), note)?;
            Some(m)
        }
        None => None,
    };
    if opts.int8 {
        for (name, model) in [("int8", Some(&dense)), ("pruned+int8", pruned.as_ref())] {
            if let Some(model) = model {
                shelf.int8(name, model, opts.int8_block)?;
            }
        }
    }
    if opts.distill {
        let d = &src.recipe.refine.distill;
        let kind = src.recipe.model.kind;
        log.info(&format!(
            "distilling into a student ({}) for {} steps",
            student_size(d, kind),
            d.steps
        ));
        let fitted = student(&src, &dense, log)?;
        let note = student_note(d, kind, &fitted);
        shelf.safetensors("student", "student.safetensors", fitted.model, note)?;
    }
    log.info("timing every variant side by side");
    let Shelf {
        out,
        mut variants,
        models,
        ..
    } = shelf;
    time_variants(&mut variants, &models.iter().collect::<Vec<_>>(), &src.val);
    let report = CompressReport {
        run: run.to_path_buf(),
        source_step: src.step,
        prunable_entries: entries,
        holdout_samples: src.hold.len(),
        latency_batch: LATENCY_BATCH,
        variants,
    };
    contrai_run::write_json(&out.join("compress.json"), &report)?;
    Ok(report)
}

/// The variants made so far, their models, and the directory their files go to.
struct Shelf<'a> {
    src: &'a Source,
    out: PathBuf,
    variants: Vec<Variant>,
    models: Vec<Classifier>,
}

impl<'a> Shelf<'a> {
    fn new(src: &'a Source, out: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(&out).map_err(|e| TrainError::io(&out, e))?;
        Ok(Shelf {
            src,
            out,
            variants: Vec::new(),
            models: Vec::new(),
        })
    }

    /// Measures `model` (validation and holdout accuracy) and puts it on the shelf.
    fn add(&mut self, name: &str, file: &str, model: Classifier, bytes: u64, note: String) {
        let src = self.src;
        let m = Measured::of(&model, &src.val, &src.hold, eval_batch(&src.recipe), bytes);
        let file = Some(format!("compress/{file}"));
        self.variants.push(variant(name, file, &model, m, note));
        self.models.push(model);
    }

    /// Writes `model` as safetensors and adds it.
    fn safetensors(&mut self, name: &str, file: &str, model: Classifier, note: String) -> Result<()> {
        let path = self.out.join(file);
        save_safetensors(&model, &path)?;
        let bytes = std::fs::metadata(&path).map_or(0, |x| x.len());
        self.add(name, file, model, bytes, note);
        Ok(())
    }

    /// Quantizes `model` to int8, writes its record and adds it.
    fn int8(&mut self, name: &str, model: &Classifier, block: Option<u8>) -> Result<()> {
        let q = quantize_int8(model.clone(), block);
        let rec = record_bytes(&q)?;
        let file = format!("{name}.bpk").replace('+', "-");
        contrai_base::write_atomic(self.out.join(&file), &rec)?;
        self.add(name, &file, q, rec.len() as u64, scheme_text(block));
        Ok(())
    }
}

/// A finished run's recipe and its partitions encoded as it trained on them (the holdout read
/// once here): what a tool working on the run afterwards needs.
pub struct RunData {
    /// The run's own recipe.
    pub recipe: Recipe,
    /// Its classes.
    pub classes: Classes,
    /// The train partition.
    pub train: Encoded,
    /// The validation partition.
    pub val: Encoded,
    /// The holdout.
    pub holdout: Encoded,
}

impl RunData {
    /// Reads `run`'s recipe, encoder, classes and split.
    pub fn open(run: &Path) -> Result<RunData> {
        let recipe = crate::setup::run_recipe(run)?;
        let enc = Encoder::load(&recipe, run)?;
        let classes: Classes = contrai_run::read_json(&run.join(contrai_run::CLASSES))?;
        let mut prepared = crate::data::prepare(&recipe, run, &Silent, crate::data::Reuse::Kept)?;
        Ok(RunData {
            train: Encoded::new(&prepared.train, &enc, &classes, "train")?,
            val: Encoded::new(&prepared.val, &enc, &classes, "val")?,
            holdout: Encoded::new(&prepared.holdout.read_once()?, &enc, &classes, "holdout")?,
            recipe,
            classes,
        })
    }

    /// The model of checkpoint `dir` of this run (a LoRA fine-tune's adapters merged).
    pub fn model_at(&self, l: &Loaded) -> Result<Classifier> {
        let device = Device::flex().autodiff();
        let fresh = Classifier::new(
            &self.recipe.model,
            self.classes.names.len(),
            self.train.width,
            self.recipe.run.seed,
            &device,
        )?;
        l.weights_into(fresh, &self.recipe.model).map(crate::lora::merge)
    }
}

impl Source {
    /// All training rows, and validation to select the best evaluation.
    fn fit_data(&self) -> FitData<'_> {
        FitData {
            train: &self.train,
            rows: &self.rows,
            val: &self.val,
            eval_batch: eval_batch(&self.recipe),
        }
    }
}

/// Reads the run's data and the source checkpoint.
fn open(run: &Path, step: Option<u64>, log: &dyn Log) -> Result<Source> {
    let d = RunData::open(run)?;
    let l = source_checkpoint(&run.join("checkpoints"), step, log)?;
    let model = d.model_at(&l)?;
    log.info(&format!(
        "source: {} (step {})",
        l.dir.display(),
        l.state.engine.step
    ));
    Ok(Source {
        masks: l.masks()?,
        step: l.state.engine.step,
        rows: (0..d.train.len()).collect(),
        recipe: d.recipe,
        train: d.train,
        val: d.val,
        hold: d.holdout,
        model,
    })
}

/// The checkpoint of `step`, or the run's best (the newest when it names none).
fn source_checkpoint(root: &Path, step: Option<u64>, log: &dyn Log) -> Result<Loaded> {
    let latest = checkpoint::load_latest(
        root,
        &[checkpoint::Kind::Scheduled, checkpoint::Kind::Stop],
        &mut |w| log.warn(&w),
    )?
    .ok_or_else(|| TrainError::Corrupt {
        path: root.to_path_buf(),
        message: "holds no valid checkpoint".into(),
    })?;
    let want = step.or(latest.state.conductor.best.map(|b| b.0));
    match want {
        Some(s) if s != latest.state.engine.step => {
            let dir = root.join(checkpoint::dir_name(s));
            if !dir.is_dir() {
                let have: Vec<String> = checkpoint::list(root)
                    .iter()
                    .map(|(s, _)| s.to_string())
                    .collect();
                return Err(TrainError::Corrupt {
                    path: dir,
                    message: format!("no such checkpoint; the run keeps steps {}", have.join(", ")),
                });
            }
            checkpoint::load(&dir)
        }
        _ => Ok(latest),
    }
}

/// Whether a parameter path is prunable: a weight matrix the recipe's `contract.prune` globs select.
fn prunable_paths(recipe: &Recipe) -> impl Fn(&str) -> bool + use<> {
    let rules = PruneRules::new(&recipe.contract.prune);
    move |p: &str| p.ends_with("weight") && rules.rule_for(p).is_some()
}

/// One-shot magnitude pruning to `share` (kept masks stay), then fine-tuning with the masks held.
fn prune_and_tune(
    src: &Source,
    opts: &CompressOptions,
    share: f64,
    log: &dyn Log,
) -> Result<(Classifier, String)> {
    let prunable = prunable_paths(&src.recipe);
    let target = |p: &str| prunable(p).then_some(Target::uncapped(share));
    let mut masks = src.masks.clone();
    update_all(
        &src.model,
        &mut masks,
        &target,
        opts.scope,
        opts.structure(&src.recipe),
    );
    let model = apply_masks(src.model.clone(), &masks);
    let r = &src.recipe;
    let lr = opts.lr.unwrap_or(r.main.lr / 10.0);
    let data = src.fit_data();
    let cfg = Fit {
        steps: opts.steps,
        batch: r.main.batch.min(src.rows.len()),
        schedule: Schedule {
            peak: lr,
            floor: 0.0,
            warmup: 0,
            steps: opts.steps,
            decay: Decay::Linear,
        },
        clip: r.main.clip_norm,
        eval_every: (opts.steps / 5).max(1),
        dropout: r.model.dropout,
        seed: r.run.seed ^ 0xF1E,
    };
    let loss = |m: &Classifier, b: &Batch, _: &[usize], d: Option<&Dropout>| {
        cross_entropy(m.forward(b, d), b.labels())
    };
    let fitted = if opts.steps == 0 {
        None
    } else {
        Some(fit(
            model.clone(),
            optimizer(r),
            &cfg,
            &data,
            &masks,
            &loss,
            &mut log_evaluations(log),
        )?)
    };
    let scope = match (opts.scope, opts.heads, opts.units) {
        (_, true, true) => "whole attention heads and feed-forward units",
        (_, true, false) => "whole attention heads, magnitude elsewhere",
        (_, false, true) => "whole feed-forward units, magnitude elsewhere",
        (PruneScope::Global, ..) => "global magnitude",
        (PruneScope::Module, ..) => "magnitude per module",
    };
    let note = format!(
        "{:.0} % of the prunable weights ({scope}), fine-tuned {} steps from LR {lr:.1e}{}",
        100.0 * masks.overall(),
        opts.steps,
        fitted
            .as_ref()
            .map_or(String::new(), |f| format!(", best at step {}", f.best.0))
    );
    Ok((fitted.map_or_else(|| model.valid(), |f| f.model), note))
}

/// The recipe's student, distilled from `teacher` on all training rows.
fn student(src: &Source, teacher: &Classifier, log: &dyn Log) -> Result<Fitted> {
    let r = &src.recipe;
    let data = src.fit_data();
    distill(
        teacher,
        &r.model,
        &r.refine.distill,
        &data,
        optimizer(r),
        (r.run.seed, r.main.clip_norm),
        &mut log_evaluations(log),
    )
}
