//! contrai-train's integration tests, one module per area in one test binary: each binary links
//! the crate and everything under it, so one link serves them all.

mod common;
mod compress;
mod default_run;
mod lifecycle;
mod mlp;
mod predict;
mod pretrained;
mod pruning;
mod resume;
mod spike;
mod training;
