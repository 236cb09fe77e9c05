//! `contrai compress`: prune, quantize or distil an existing run's best checkpoint.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use contrai_recipe::PruneScope;
use contrai_train::Stderr;
use contrai_train::compress::{CompressOptions, CompressReport, compress};

use crate::flag_values::choice;

/// Make smaller models from a finished (or interrupted) run, without retraining from scratch:
/// magnitude pruning with masked fine-tuning, int8 quantization, distillation into the recipe's
/// `[refine.distill]` student. Each is made from the same checkpoint (the run's best unless
/// --step names one), measured side by side (holdout and validation accuracy, zero weights,
/// parameters, bytes on disk, CPU latency) and written to RUN_DIR/compress/ with compress.json.
///
/// With none of --prune, --int8, --distill it makes all three (pruning 50 %).
///
/// Example: contrai compress runs/demo --prune 0.5 --steps 100 --int8
#[derive(Args)]
pub struct CompressArgs {
    /// The run directory `contrai train` wrote.
    run: PathBuf,
    /// Prune this share of the prunable weights (the recipe's contract.prune globs), e.g. 0.5.
    #[arg(long, value_name = "SHARE")]
    prune: Option<f64>,
    /// Where one magnitude threshold applies: over all prunable weights, or within each module.
    #[arg(long, value_parser = choice::<PruneScope>(), default_value = "global")]
    scope: PruneScope,
    /// Prune attention by whole heads (their query/key/value columns and output rows).
    #[arg(long)]
    heads: bool,
    /// Prune feed-forward layers by whole units (an expansion column with its projection row):
    /// the pruned model is then written with those units removed, smaller and faster.
    #[arg(long)]
    units: bool,
    /// Fine-tuning steps after pruning, pruned weights held at zero.
    #[arg(long, default_value_t = 100)]
    steps: u64,
    /// Peak LR of that fine-tuning, decaying linearly to 0 [default: main.lr / 10].
    #[arg(long)]
    lr: Option<f64>,
    /// Quantize to int8 (the source model, and the pruned one when pruning).
    #[arg(long)]
    int8: bool,
    /// With --int8: a scale every N weights of a row (e.g. 32) instead of one a weight matrix.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..))]
    int8_block: Option<u8>,
    /// Distil into the recipe's [refine.distill] student.
    #[arg(long)]
    distill: bool,
    /// The checkpoint step to start from [default: the run's best].
    #[arg(long)]
    step: Option<u64>,
    /// Print compress.json instead of the table.
    #[arg(long)]
    json: bool,
}

/// Runs `contrai compress`.
pub fn run(args: CompressArgs) -> anyhow::Result<ExitCode> {
    let all = args.prune.is_none() && !args.int8 && !args.distill;
    if let Some(s) = args.prune
        && !(0.0..1.0).contains(&s)
    {
        anyhow::bail!("--prune {s}: expected a share in [0, 1), e.g. 0.5");
    }
    if let Some(lr) = args.lr
        && !(lr > 0.0 && lr < 1.0)
    {
        anyhow::bail!("--lr {lr}: expected a learning rate in (0, 1), e.g. 5e-5");
    }
    let opts = CompressOptions {
        prune: if all { Some(0.5) } else { args.prune },
        scope: args.scope,
        heads: args.heads,
        units: args.units,
        steps: args.steps,
        lr: args.lr,
        int8: all || args.int8 || args.int8_block.is_some(),
        int8_block: args.int8_block,
        distill: all || args.distill,
        step: args.step,
    };
    let report = compress(&args.run, &opts, &Stderr)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(r: &CompressReport) {
    println!(
        "from checkpoint step {}; holdout {} samples; latency: CPU ms a batch of {}",
        r.source_step, r.holdout_samples, r.latency_batch
    );
    println!(
        "{:<12} {:>9} {:>9} {:>7} {:>10} {:>10} {:>8}  file",
        "model", "holdout", "val", "zeros", "params", "bytes", "ms"
    );
    for v in &r.variants {
        println!(
            "{:<12} {:>8.2}% {:>8.2}% {:>6.1}% {:>10} {:>10} {:>8}  {}",
            v.name,
            100.0 * v.holdout_accuracy,
            100.0 * v.val_accuracy,
            100.0 * v.zero_weights,
            v.parameters,
            v.bytes,
            v.latency_ms.map_or("—".into(), |m| format!("{m:.2}")),
            v.file.as_deref().unwrap_or("—")
        );
        println!("{:<12} {}", "", v.note);
    }
}
