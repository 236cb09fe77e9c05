//! contrai-lifecycle's integration tests, one module per area in one test binary: each binary links
//! the crate and everything under it, so one link serves them all.

mod conductor;
mod curve_engine;
mod python_protocol;
mod spike;
