//! Contrai's report: one self-contained HTML file with SVG plots of a run directory or of any
//! log the doctor reads — loss, accuracy, learning rate and gradient norm against steps, phases
//! as shaded bands, findings and decisions as markers, and the doctor's recommendations.

pub mod chart;
pub mod drift;
pub mod page;
pub mod run;

pub use run::{ReportError, RunExtras, compared, is_run_dir, render, run_dir_extras, run_section};
