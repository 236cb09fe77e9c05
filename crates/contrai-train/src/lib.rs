//! Contrai's trainer on Burn: models, the training loop, checkpoints with exact resume, and the
//! contraction controller (`../shared/DESIGN.md` §1–3).
//!
//! [`train`] runs a recipe's main phase in a run directory: the data audit and leakage-proof
//! split, a tokenizer fitted on train only, the transformer classifier on Burn's flex CPU backend,
//! AdamW with the recipe's schedule, accumulation, clipping, evaluation, step checkpoints, and the
//! holdout evaluated once at the end.

#![warn(missing_docs)]

pub mod alloc;
pub mod batch;
pub mod calibrate;
pub mod checkpoint;
pub mod data;
pub mod dropout;
pub mod error;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod tokenizer;
pub mod trainer;

pub use error::{Result, TrainError};
pub use trainer::{FinalEval, Log, Options, Outcome, Stderr, train};
