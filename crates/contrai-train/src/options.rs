//! How a run is asked for and what it reports: options, the outcome, where messages go.

use std::path::PathBuf;

use contrai_recipe::Recipe;
use contrai_run::FinalEval;

use crate::stop::{Signal, Stop};

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
    /// On `resume`, train on the run's own split even when the data its recipe names changed.
    pub keep_split: bool,
    /// Stop once this many steps are done (a planned interruption; resume continues).
    pub stop_after: Option<u64>,
    /// Draw a progress bar on stderr (hidden anyway when stderr is not a terminal).
    pub progress_bar: bool,
    /// Stop cleanly when this is requested (a checkpoint of the step it stops at is written).
    pub stop: Stop,
    /// Test hook: poison the loss of this global step (1-based) with NaN, once per process, to
    /// exercise the non-finite guard.
    pub inject_nonfinite_at: Option<u64>,
}

impl Options {
    /// Options for a fresh run of `recipe` in `run_dir`.
    pub fn new(recipe: Recipe, run_dir: impl Into<PathBuf>) -> Options {
        Options {
            recipe,
            run_dir: run_dir.into(),
            resume: false,
            keep_split: false,
            stop_after: None,
            progress_bar: false,
            stop: Stop::new(),
            inject_nonfinite_at: None,
        }
    }
}

/// What a call to [`crate::train`] did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Steps done.
    pub step: u64,
    /// Whether the run finished (false after `stop_after` or a stop).
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
    /// Why and where the run stopped before its end, when it was asked to.
    pub stopped: Option<Stopped>,
}

/// A run stopped on request: `--resume` continues it from `checkpoint`.
#[derive(Debug, Clone)]
pub struct Stopped {
    /// What asked it to stop.
    pub signal: Signal,
    /// The checkpoint of the step it stopped at.
    pub checkpoint: PathBuf,
}
