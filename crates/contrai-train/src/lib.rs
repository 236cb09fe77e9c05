//! Contrai's trainer on Burn: models, the training loop, checkpoints with exact resume, and the
//! contraction controller (`../shared/DESIGN.md` §1–3).
//!
//! [`train`] runs a recipe's lifecycle in a run directory: the data audit and leakage-proof split,
//! a tokenizer (or, for the MLP, a feature standardiser) fitted on train only, the transformer
//! classifier or the MLP on Burn's flex CPU backend, then
//! `validate`, `main`, `diagnose`, `contract` and `refine` under the live doctor and the
//! controller's guards, step checkpoints with exact resume, and the holdout evaluated once at the end.

#![warn(missing_docs)]

pub mod alloc;
pub mod batch;
pub mod calibrate;
pub mod checkpoint;
pub mod compress;
pub mod controller;
pub mod data;
pub mod diagnose;
pub mod distill;
pub mod dropout;
pub mod error;
pub mod export;
pub mod features;
pub mod lifecycle;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod prune;
pub mod quantize;
pub mod setup;
pub mod tokenizer;
pub mod trainer;

pub use error::{Result, TrainError};
pub use lifecycle::train;
pub use trainer::{FinalEval, Log, Options, Outcome, Stderr};
