//! contrai-data's integration tests, one module per area in one test binary: each binary links
//! the crate and everything under it, so one link serves them all.

mod common;
mod contamination;
mod delimited;
mod drift;
mod ground_truth;
mod input_errors;
mod near_copies;
mod spamassassin;
mod split;
mod store;
