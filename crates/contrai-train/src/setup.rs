//! A run's first stage: the resolved recipe (refused early when the trainer cannot run it), the
//! data split (or an existing one), the encoder (tokenizer or feature standardiser) fitted on
//! train only, the class list and the encoded partitions.

use contrai_data::Progress;
use contrai_recipe::{Dedup, ModelKind, Phase, Precision, Recipe};
use contrai_run::{RunDir, RunFormat, read_json, write_json};

use crate::batch::{Classes, Encoded, Encoder};
use crate::data::{self, Holdout};
use crate::error::{Result, TrainError};
use crate::options::{Log, Options};

/// What the final export needs besides the model.
#[derive(Debug, Clone)]
pub struct Extras {
    /// The tokenizer or feature standardiser (saved with the run).
    pub encoder: Encoder,
    /// The classes, in index order.
    pub classes: Classes,
}

/// The data a run trains on.
pub struct TrainData {
    /// The encoded train partition.
    pub train: Encoded,
    /// Ids of the train samples, by row.
    pub train_ids: Vec<String>,
    /// The encoded validation partition.
    pub val: Encoded,
    /// The sealed holdout.
    pub holdout: Holdout,
    /// Encoder and classes.
    pub extras: Extras,
}

/// Everything a run starts from.
pub struct Setup {
    /// The recipe in force (on resume, the run directory's own).
    pub recipe: Recipe,
    /// Its data.
    pub data: TrainData,
}

/// Who writes a run of this engine (`run.json`).
const WRITER: &str = concat!("contrai ", env!("CARGO_PKG_VERSION"), " (burn engine)");

impl Setup {
    /// Resolves the recipe, prepares the data and writes the run's fixed files.
    pub fn open(opts: &Options, data_progress: &dyn Progress, log: &dyn Log) -> Result<Setup> {
        let run = RunDir::new(&opts.run_dir);
        if run.is_started() && !opts.resume {
            return Err(TrainError::Exists {
                path: opts.run_dir.clone(),
            });
        }
        let recipe = resolve(opts, log)?;
        check(&recipe)?;
        use_precision(&recipe)?;
        std::fs::create_dir_all(run.path()).map_err(|e| TrainError::io(run.path(), e))?;
        RunFormat::stamp(&run, WRITER)?;
        // A resumed run reuses everything its first session wrote; a fresh one rewrites it all.
        let reuse = opts.resume && run.recipe().is_file();
        if !reuse {
            contrai_base::write_atomic(run.recipe(), recipe.to_toml().as_bytes())?;
        }
        let split = match (reuse, opts.keep_split) {
            (false, _) => data::Reuse::No,
            (true, false) => data::Reuse::Checked,
            (true, true) => data::Reuse::Kept,
        };
        let mut prepared = data::prepare(&recipe, run.path(), data_progress, split)?;
        if let Some(w) = prepared.manifest.heavy_drop().filter(|_| !reuse) {
            log.warn(&w);
        }
        let enc_path = run.path().join(Encoder::file_name(&recipe));
        let encoder = if reuse && enc_path.is_file() {
            Encoder::load(&recipe, run.path())?
        } else {
            let e = Encoder::fit(&recipe, &prepared.train)?;
            e.save(&enc_path)?;
            e
        };
        let classes = if reuse && run.classes().is_file() {
            read_json(&run.classes())?
        } else {
            let c = Classes::from_labels(&prepared.train.labels);
            write_json(&run.classes(), &c)?;
            c
        };
        let train = Encoded::new(&prepared.train, &encoder, &classes, "train")?;
        let val = Encoded::new(&prepared.val, &encoder, &classes, "val")?;
        let train_ids = std::mem::take(&mut prepared.train.ids);
        describe(&recipe, &train, &val, &classes, &encoder, log);
        Ok(Setup {
            recipe,
            data: TrainData {
                train,
                train_ids,
                val,
                holdout: prepared.holdout.with_ledger(run.holdout_reads()),
                extras: Extras { encoder, classes },
            },
        })
    }
}

/// The run's data and schedule in two lines.
fn describe(
    recipe: &Recipe,
    train: &Encoded,
    val: &Encoded,
    classes: &Classes,
    encoder: &Encoder,
    log: &dyn Log,
) {
    let m = &recipe.main;
    log.info(&format!(
        "data: {} train / {} val samples, {} classes; {}",
        train.len(),
        val.len(),
        classes.names.len(),
        encoder.describe()
    ));
    let phases: Vec<&str> = recipe.run.phases.iter().map(Phase::as_ref).collect();
    log.info(&format!(
        "phases: {}; effective batch {} = batch {} x devices {} x accumulate {}; main {} steps, warmup {}, {:?} to {:e}",
        phases.join(" → "),
        m.effective_batch(),
        m.batch,
        m.devices,
        m.accumulate,
        m.steps,
        contrai_recipe::schedule::warmup_steps(m.steps, m.warmup),
        m.schedule,
        m.min_lr
    ));
}

/// The recipe in force: on resume the run's own `recipe.toml` wins (with a warning if it differs).
fn resolve(opts: &Options, log: &dyn Log) -> Result<Recipe> {
    let path = opts.run_dir.join("recipe.toml");
    let given = sized(opts.recipe.clone())?;
    if !(opts.resume && path.is_file()) {
        return Ok(given);
    }
    let stored = Recipe::from_file(&path).map_err(|e| TrainError::Unsupported(e.to_string()))?;
    if stored != given {
        log.warn(&format!(
            "resuming with the run's own {} (it differs from the recipe given)",
            path.display()
        ));
    }
    Ok(stored)
}

/// `recipe` with a pretrained encoder's sizes (vocabulary, width, layers, heads, feed-forward)
/// read from its config, so that the plan, its parameter count and the run's `recipe.toml` say
/// what trains; other recipes as they are.
pub fn sized(mut recipe: Recipe) -> Result<Recipe> {
    if recipe.model.kind == ModelKind::Bert {
        recipe.model = crate::pretrained::sized(&recipe.model)?;
    }
    Ok(recipe)
}

/// The recipe a run directory holds (`compress` and `predict` read a run through it).
pub fn run_recipe(run: &std::path::Path) -> Result<Recipe> {
    let path = run.join("recipe.toml");
    if !path.is_file() {
        return Err(TrainError::Corrupt {
            path: run.to_path_buf(),
            message: "is not a run directory (no recipe.toml); give the directory `contrai train` wrote"
                .into(),
        });
    }
    Recipe::from_file(&path).map_err(|e| TrainError::Unsupported(e.to_string()))
}

/// Refuses what the trainer cannot run, before any work.
pub fn check(recipe: &Recipe) -> Result<()> {
    recipe
        .validate()
        .map_err(|(k, m)| TrainError::Unsupported(format!("`{k}` {m}")))?;
    match recipe.model.kind {
        ModelKind::Mlp => check_mlp(recipe)?,
        ModelKind::Bert => check_bert(recipe)?,
        ModelKind::Transformer => {}
    }
    if recipe.main.devices != 1 {
        return Err(TrainError::Unsupported(format!(
            "main.devices = {}: data-parallel training is not available yet on the CPU backend; use 1",
            recipe.main.devices
        )));
    }
    Ok(())
}

/// The matrix products of this process in the recipe's arithmetic from now on (`model.precision`):
/// bf16 — refused in one sentence, before any work, where the CPU has none — or f32.
pub fn use_precision(recipe: &Recipe) -> Result<()> {
    let bf16 = recipe.model.precision == Precision::Bf16;
    contrai_kernels::bf16::set_products(bf16).map_err(|why| {
        TrainError::Unsupported(format!(
            "model.precision = \"bf16\": {why}; use \"f32\" (or leave it out)"
        ))
    })
}

/// A pretrained model directory that is whole and fits the recipe's sequence length.
fn check_bert(recipe: &Recipe) -> Result<()> {
    let dir = crate::pretrained::open(&recipe.model)?;
    dir.tokenizer(recipe.model.seq_len)?;
    Ok(())
}

/// What an MLP on numeric features cannot be asked for.
fn check_mlp(recipe: &Recipe) -> Result<()> {
    let refuse = |m: &str| Err(TrainError::Unsupported(format!("model.kind = \"mlp\": {m}")));
    if recipe.data.path.is_empty() {
        return refuse(
            "set data.path to a file whose `data.text` field holds each sample's numeric features \
             (the built-in demo is text)",
        );
    }
    if recipe.data.dedup == Dedup::Near {
        return refuse(
            "data.dedup = \"near\" compares words; use \"exact\" or \"none\" for numeric features",
        );
    }
    if recipe.contract.prune_heads {
        return refuse("contract.prune_heads needs attention heads; an MLP has none");
    }
    if recipe.contract.prune_units {
        return refuse(
            "contract.prune_units prunes a transformer's feed-forward units; an MLP has none (its layers are pruned by single weights)",
        );
    }
    Ok(())
}
