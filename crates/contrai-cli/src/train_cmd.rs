//! `contrai train`: run a recipe's training in a run directory, or resume one.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use contrai_recipe::Recipe;
use contrai_run::{FINAL_INT8, FINAL_MODEL, FINAL_STUDENT, RunDir};
use contrai_train::{Options, Stderr, Stop, train};

use crate::progress::Bars;

/// Train a model from a recipe: data audit and leakage-proof split, tokenizer fitted on train,
/// the transformer classifier, step checkpoints, the holdout evaluated once at the end.
///
/// With no recipe and no data it trains the built-in default on the demo dataset. With
/// `model.kind = "mlp"` it trains an MLP on numeric features (the field `data.text` holding a
/// JSON array of numbers, or numbers separated by commas or spaces), standardised on train.
///
/// Ctrl-C, SIGTERM or SIGUSR1 (what clusters send before they preempt a job) finish the current
/// step, write a checkpoint of it and exit; `--resume` then continues exactly as if the run had
/// never stopped. A second Ctrl-C exits at once. One process at a time trains in a run directory.
///
/// Example: contrai train spam.toml --data mail.jsonl --out runs
#[derive(Args)]
pub struct TrainArgs {
    /// The recipe (TOML); default: the built-in recipe (`contrai recipe init` prints it).
    recipe: Option<PathBuf>,
    /// The data: a JSONL/CSV/Parquet file, or a split directory with manifest.json
    /// (overrides the recipe's data.path).
    #[arg(long)]
    data: Option<PathBuf>,
    /// The data's format when its extension does not tell it: jsonl, csv, tsv or parquet
    /// (overrides data.format).
    #[arg(long)]
    format: Option<contrai_data::Format>,
    /// A CSV/TSV file without a header row: its columns' names, in order, e.g. label,text
    /// (overrides data.columns).
    #[arg(long, value_delimiter = ',')]
    columns: Vec<String>,
    /// Parent directory of runs (overrides the recipe's run.out); the run is <out>/<run.name>.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run from its newest valid checkpoint, exactly where it stopped.
    #[arg(long)]
    resume: bool,
    /// With --resume: train on the split the run holds even though the data its recipe names
    /// changed since (a new version of the split, or an edited file); without it that is refused.
    #[arg(long, requires = "resume")]
    keep_split: bool,
}

/// Runs `contrai train`.
pub fn run(args: TrainArgs) -> anyhow::Result<ExitCode> {
    let mut recipe = match &args.recipe {
        Some(p) => Recipe::from_file(p)?,
        None => Recipe::default(),
    };
    if let Some(d) = &args.data {
        recipe.data.path = d.display().to_string();
    }
    if args.format.is_some() {
        recipe.data.format = args.format;
    }
    if !args.columns.is_empty() {
        recipe.data.columns = args.columns.clone();
    }
    if let Some(o) = &args.out {
        recipe.run.out = o.display().to_string();
    }
    let run_dir = PathBuf::from(&recipe.run.out).join(&recipe.run.name);
    let run = RunDir::new(&run_dir);
    let opts = Options {
        resume: args.resume,
        keep_split: args.keep_split,
        progress_bar: true,
        stop: Stop::on_signals()?,
        ..Options::new(recipe, &run_dir)
    };
    let outcome = train(&opts, &Bars::default(), &Stderr)?;
    if let Some(s) = &outcome.stopped {
        eprintln!(
            "stopped by {} after step {}: checkpoint {} written and verified; continue with\n  contrai train{} --out {} --resume",
            s.signal.name(),
            outcome.step,
            s.checkpoint.display(),
            args.recipe
                .as_ref()
                .map_or(String::new(), |p| format!(" {}", p.display())),
            PathBuf::from(&opts.recipe.run.out).display()
        );
        return Ok(ExitCode::from(s.signal.exit_code()));
    }
    let planned = outcome.eval.as_ref().map_or(0, |e| e.planned_steps);
    eprintln!(
        "{} steps (of {planned} planned) in {} ({} ms a step, {:.0} ms a checkpoint, effective batch {}, peak memory {})",
        outcome.step,
        run_dir.display(),
        // An MLP's step takes well under a millisecond.
        if outcome.ms_per_step < 10.0 {
            format!("{:.2}", outcome.ms_per_step)
        } else {
            format!("{:.0}", outcome.ms_per_step)
        },
        outcome.ms_per_checkpoint,
        outcome.effective_batch,
        peak_memory()
    );
    if let Some(e) = &outcome.eval {
        println!(
            "holdout: accuracy {:.2} % (loss {:.4}) on {} samples; val accuracy {:.2} %",
            e.holdout_accuracy * 100.0,
            e.holdout_loss,
            e.holdout_samples,
            e.val_accuracy * 100.0
        );
        if let Some((step, why)) = &e.main_end {
            println!(
                "main ended at step {step}: {why}; decisions: {}",
                run.decisions().display()
            );
        }
        println!("weights: {}", run.final_file(FINAL_MODEL).display());
        if let Some(q) = e.int8.as_ref().filter(|q| q.kept) {
            println!(
                "int8: holdout accuracy {:.2} %, {:.1}x smaller: {}",
                q.holdout_accuracy * 100.0,
                q.dense_bytes as f64 / q.bytes.max(1) as f64,
                run.final_file(FINAL_INT8).display()
            );
        }
        if let Some(s) = &e.student {
            println!(
                "student: holdout accuracy {:.2} %, {} parameters: {}",
                s.holdout_accuracy * 100.0,
                s.parameters,
                run.final_file(FINAL_STUDENT).display()
            );
        }
    }
    let report = run.report();
    contrai_base::write_atomic(&report, contrai_report::render(&run_dir, None)?.as_bytes())?;
    println!("report: {}", report.display());
    Ok(ExitCode::SUCCESS)
}

/// The process's peak resident memory so far, in words (`getrusage`'s maximum RSS).
fn peak_memory() -> String {
    // SAFETY: getrusage(2) fills the struct it is given; RUSAGE_SELF is always valid.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return "unknown".into();
    }
    // Linux reports kilobytes.
    format!("{:.2} GB", u.ru_maxrss as f64 / 1e6)
}
