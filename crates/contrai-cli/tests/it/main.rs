//! contrai-cli's integration tests, one module per area in one test binary: each binary links
//! the crate and everything under it, so one link serves them all.

mod check_cli;
mod data_cli;
mod doctor_cli;
mod pipe_cli;
mod plan_report_cli;
mod recipe_cli;
mod train_cli;
mod util;
mod watch_cli;
