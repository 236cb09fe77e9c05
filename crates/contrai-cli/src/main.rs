//! `contrai`: data integrity, training under a live doctor, contraction, and diagnosis of any run.

mod check_cmd;
mod compress_cmd;
mod data_cmd;
mod doctor_cmd;
mod flag_values;
mod plan_cmd;
mod predict_cmd;
mod progress;
mod recipe_cmd;
mod report_cmd;
mod tracking;
mod train_cmd;
mod watch_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The version and the commit it was built from (`build.rs`), e.g. `0.1.0 (2d2bfba5ca3c)`.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("CONTRAI_COMMIT"), ")");

/// Contrai: clean data, train under a live doctor, contract the converged model, diagnose any run.
#[derive(Parser)]
#[command(name = "contrai", version = VERSION, about, long_about = None, propagate_version = true)]
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
    ///
    /// Each finding quotes its evidence from the log, says how sure it is (low / medium / high)
    /// and what to change; the task and the training setup (schedule, warmup, batch) are read
    /// from the files beside the log (config.json, hparams.yaml, training_args.yaml, a Trainer's
    /// TensorBoard arguments) or from the tracker's run (MLflow params, W&B and Trackio configs).
    ///
    /// Example: contrai doctor output/checkpoint-500    or    contrai doctor lightning_logs --json
    /// or    contrai doctor wandb/    or    contrai doctor mlflow://127.0.0.1:5000/<run id>
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
    /// Check a recipe before step 1: schedule, warmup, effective batch, checkpoint cadence, splits.
    ///
    /// Each finding is one sentence with its fix, a kind and a severity: warmup outside 2–5 % of
    /// main's steps, a linear or constant decay where the rules decay along a cosine, a LoRA job at
    /// LR ≥ 1e-4 with long linear warmup and linear decay (the first seed article's failure), an
    /// effective batch (batch × devices × accumulate) outside 16–64, checkpoints rarer than every
    /// 50 steps, and, for a split directory given as data, a missing validation or holdout
    /// partition. Python jobs get the same check from `contrai.preflight` (fp16 on a bf16 model,
    /// checkpointing with adapters and no input gradients, an accumulated loss not normalised).
    ///
    /// Exit status: 0 when no finding is an error (warnings alone pass), 1 when one is, 2 when the
    /// recipe cannot be read (the error names its file, line and key).
    ///
    /// Example: contrai check spam.toml    or    contrai check spam.toml --json | jq '.findings[].kind'
    Check(check_cmd::CheckArgs),
    /// Plan the lifecycle: phase table, LR segments, calendar of a long programme, cost, advice.
    ///
    /// Example: contrai plan spam.toml --weeks 12 --cost-per-day 250 --unstable-infra
    Plan(plan_cmd::PlanArgs),
    /// Open a live page of a run as it trains: loss, accuracy, LR and gradient norm on shared
    /// step axes, the lifecycle's phases and decisions, the doctor's findings as they appear,
    /// the pace and the time left.
    ///
    /// It reads any log `contrai doctor` reads (a Contrai run, an HF output_dir, a Lightning
    /// version_N, a TensorBoard directory), only what was appended since it last looked, and
    /// sends the page again as it changes (server-sent events; nothing is fetched from the
    /// network). It listens on 127.0.0.1 unless --host says otherwise, then with an access token.
    ///
    /// Example: contrai watch runs/demo    or    contrai watch lightning_logs/version_0 runs/demo --port 0
    Watch(watch_cmd::WatchArgs),
}

fn main() -> ExitCode {
    quiet_on_closed_pipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Data(cmd) => data_cmd::run(cmd),
        Command::Recipe(cmd) => recipe_cmd::run(cmd),
        Command::Doctor(args) => doctor_cmd::run(args),
        Command::Train(args) => train_cmd::run(args),
        Command::Compress(args) => compress_cmd::run(args),
        Command::Report(args) => report_cmd::run(args),
        Command::Check(args) => check_cmd::run(args),
        Command::Plan(args) => plan_cmd::run(args),
        Command::Predict(args) => predict_cmd::run(args),
        Command::Watch(args) => watch_cmd::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) if closed_pipe(&err) => ExitCode::from(CLOSED_PIPE),
        Err(err) => {
            eprintln!("error: {}", message(&err));
            ExitCode::from(2)
        }
    }
}

/// The status of a program a closed pipe ended (128 + SIGPIPE), as a shell reports it.
const CLOSED_PIPE: u8 = 141;

/// Output piped into a reader that stops early (`contrai plan | head -1`) ends the program
/// quietly with [`CLOSED_PIPE`], as Unix tools end, not with a panic and a backtrace: Rust
/// ignores SIGPIPE (the live page's sockets need that), so `println!` into the closed pipe
/// panics, and this hook turns that one panic into the exit.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(CLOSED_PIPE.into());
        }
        default(info)
    }));
}

/// Whether an error is a write into a closed pipe (output written with `?`, not `println!`).
fn closed_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// An error and its causes, each cause left out when the message before already says it (the
/// data errors print their I/O cause themselves).
fn message(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain().map(|c| c.to_string()) {
        if !out.contains(&cause) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&cause);
        }
    }
    out
}
