//! contrai-doctor's integration tests, one module per area in one test binary: each binary links
//! the crate and everything under it, so one link serves them all.

mod databases;
mod eval_cases;
mod folders;
mod fuzz_readers;
mod mlflow_server;
mod one_doctor;
mod partial;
mod real_patterns;
mod resumed;
mod synthetic;
mod tail;
mod wandb_run;
