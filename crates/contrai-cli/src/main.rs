//! `contrai`: data integrity, training under a live doctor, contraction, and diagnosis of any run.

mod choice;
mod compress_cmd;
mod data_cmd;
mod doctor_cmd;
mod plan_cmd;
mod predict_cmd;
mod progress;
mod recipe_cmd;
mod report_cmd;
mod train_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Contrai: clean data, train under a live doctor, contract the converged model, diagnose any run.
#[derive(Parser)]
#[command(name = "contrai", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Audit a dataset for duplicates, near-duplicates and label conflicts; split it without leaks.
    #[command(subcommand)]
    Data(data_cmd::DataCommand),
    /// Print the default recipe, or validate one.
    #[command(subcommand)]
    Recipe(recipe_cmd::RecipeCommand),
    /// Read training logs from any framework and say what is wrong, since when, and what to change.
    Doctor(doctor_cmd::DoctorArgs),
    /// Train a recipe (default: the built-in demo) with step checkpoints; --resume continues a run.
    ///
    /// Example: contrai train spam.toml --data mail.jsonl    or    contrai train --resume
    Train(train_cmd::TrainArgs),
    /// Prune, quantize or distil an existing run's best checkpoint, side by side, without retraining.
    ///
    /// Example: contrai compress runs/demo    or    contrai compress runs/demo --prune 0.5 --int8
    Compress(compress_cmd::CompressArgs),
    /// Write a self-contained HTML report (plots, phases, findings) of a run or any training log.
    ///
    /// Example: contrai report runs/demo    or    contrai report trainer_state.json -o run.html
    Report(report_cmd::ReportArgs),
    /// Apply a finished run's model (f32, int8 or student) to a data file: labels and probabilities.
    ///
    /// The run's own tokenizer or feature scaler encodes each sample's text field; one JSON line a
    /// sample, in file order, gives its id, the predicted label, each class's probability and the
    /// label the file gave (if any). Predictions go to stdout or --out (written atomically); the
    /// summary (samples, throughput, accuracy when the file has labels) to stderr, or to stdout
    /// with --out.
    ///
    /// Example: contrai predict runs/demo new.jsonl --out predictions.jsonl
    Predict(predict_cmd::PredictArgs),
    /// Plan the lifecycle: phase table, LR segments, calendar of a long programme, cost, advice.
    ///
    /// Example: contrai plan spam.toml --weeks 12 --cost-per-day 250 --unstable-infra
    Plan(plan_cmd::PlanArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Data(cmd) => data_cmd::run(cmd),
        Command::Recipe(cmd) => recipe_cmd::run(cmd),
        Command::Doctor(args) => doctor_cmd::run(args),
        Command::Train(args) => train_cmd::run(args),
        Command::Compress(args) => compress_cmd::run(args),
        Command::Report(args) => report_cmd::run(args),
        Command::Plan(args) => plan_cmd::run(args),
        Command::Predict(args) => predict_cmd::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
