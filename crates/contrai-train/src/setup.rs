//! A run's first stage: the resolved recipe, the data split (or an existing one), the encoder
//! (tokenizer or feature standardiser) fitted on train only, the class list and the encoded
//! partitions; `plan.json`.

use contrai_data::Progress;
use contrai_recipe::Recipe;

use crate::batch::{Classes, Encoded, Encoder};
use crate::data::{self, Holdout};
use crate::error::{Result, TrainError};
use crate::plan::RunPlan;
use crate::trainer::{Log, Options, read_json, write_json};

/// The run's count of holdout reads, across sessions.
pub const HOLDOUT_READS: &str = "holdout-reads";

/// What the final export needs besides the model.
#[derive(Debug, Clone)]
pub struct Extras {
    /// The tokenizer or feature standardiser (saved with the run).
    pub encoder: Encoder,
    /// The classes, in index order.
    pub classes: Classes,
}

/// Everything a run trains on.
pub struct Setup {
    /// The recipe in force (on resume, the run directory's own).
    pub recipe: Recipe,
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

impl Setup {
    /// Resolves the recipe, prepares the data and writes the run's fixed files.
    pub fn open(opts: &Options, data_progress: &dyn Progress, log: &dyn Log) -> Result<Setup> {
        let run = &opts.run_dir;
        let recipe_path = run.join("recipe.toml");
        let started = run.join("metrics.jsonl").exists() || run.join("checkpoints").exists();
        if started && !opts.resume {
            return Err(TrainError::Exists { path: run.clone() });
        }
        let recipe = resolve(opts, log)?;
        crate::trainer::check(&recipe)?;
        std::fs::create_dir_all(run).map_err(|e| TrainError::io(run, e))?;
        // A resumed run reuses everything its first session wrote; a fresh one rewrites it all.
        let reuse = opts.resume && recipe_path.is_file();
        if !reuse {
            contrai_data::write::write_atomic(&recipe_path, recipe.to_toml().as_bytes())?;
        }
        let mut prepared = data::prepare(&recipe, run, data_progress, reuse)?;
        let enc_path = run.join(Encoder::file_name(&recipe));
        let encoder = if reuse && enc_path.is_file() {
            Encoder::load(&recipe, run)?
        } else {
            let e = Encoder::fit(&recipe, &prepared.train)?;
            e.save(&enc_path)?;
            e
        };
        let classes_path = run.join("classes.json");
        let classes = if reuse && classes_path.is_file() {
            read_json(&classes_path)?
        } else {
            let c = Classes::from_labels(&prepared.train.labels);
            write_json(&classes_path, &c)?;
            c
        };
        let train = Encoded::new(&prepared.train, &encoder, &classes, "train")?;
        let val = Encoded::new(&prepared.val, &encoder, &classes, "val")?;
        let train_ids = std::mem::take(&mut prepared.train.ids);
        let plan = RunPlan::new(&recipe, train.len() as u64);
        write_json(&run.join("plan.json"), &plan)?;
        let m = &recipe.main;
        log.info(&format!(
            "data: {} train / {} val samples, {} classes; {}",
            train.len(),
            val.len(),
            classes.names.len(),
            encoder.describe()
        ));
        log.info(&format!(
            "phases: {}; effective batch {} = batch {} x devices {} x accumulate {}; main {} steps, warmup {}, {:?} to {:e}",
            recipe.run.phases.join(" → "),
            m.effective_batch(),
            m.batch,
            m.devices,
            m.accumulate,
            m.steps,
            contrai_recipe::schedule::warmup_steps(m.steps, m.warmup),
            m.schedule,
            m.min_lr
        ));
        Ok(Setup {
            recipe,
            train,
            train_ids,
            val,
            holdout: prepared.holdout.with_ledger(run.join(HOLDOUT_READS)),
            extras: Extras { encoder, classes },
        })
    }
}

/// The recipe in force: on resume the run's own `recipe.toml` wins (with a warning if it differs).
fn resolve(opts: &Options, log: &dyn Log) -> Result<Recipe> {
    let path = opts.run_dir.join("recipe.toml");
    if !(opts.resume && path.is_file()) {
        return Ok(opts.recipe.clone());
    }
    let stored = Recipe::from_file(&path).map_err(|e| TrainError::Unsupported(e.to_string()))?;
    if stored != opts.recipe {
        log.warn(&format!(
            "resuming with the run's own {} (it differs from the recipe given)",
            path.display()
        ));
    }
    Ok(stored)
}
