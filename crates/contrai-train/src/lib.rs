//! Contrai's Burn engine: models, the training step, evaluation, checkpoints with exact resume,
//! pruning masks, int8 and distillation — carrying out what the conductor
//! (`contrai-lifecycle`) decides (`../shared/DESIGN.md` §1–3).
//!
//! [`train`] runs a recipe's lifecycle in a run directory: the data audit and leakage-proof split,
//! a tokenizer (or, for the MLP, a feature standardiser) fitted on train only, the transformer
//! classifier or the MLP on Burn's flex CPU backend, then whatever the conductor asks —
//! `validate`, `main`, `diagnose`, `contract` and `refine` under the live doctor and its guards,
//! step checkpoints with exact resume, and the holdout evaluated once at the end.
//!
//! The public modules are what the CLI, the examples and the tests use; the others (LoRA,
//! distillation, dropout, export, compaction, measurements, the tokenizer, the pretrained
//! encoder's glue) are the engine's own.

#![warn(missing_docs)]

pub mod batch;
pub mod calibrate;
pub mod checkpoint;
mod compact;
pub mod compress;
pub mod data;
mod distill;
pub mod dropout;
mod engine;
pub mod error;
pub mod evaluate;
mod export;
mod features;
mod finale;
mod journal;
mod lora;
mod measure;
pub mod model;
pub mod options;
mod persist;
pub mod predict;
mod pretrained;
pub mod process;
pub mod prune;
pub mod quantize;
mod recompute;
pub mod setup;
pub mod step;
pub mod stop;
mod tokenizer;

pub use engine::train;
pub use error::{Result, TrainError};
pub use options::{Log, Options, Outcome, Stderr, Stopped};
pub use stop::{Signal, Stop};
