//! `contrai doctor`: diagnose training logs (filled in by the doctor issue).

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `contrai doctor`.
#[derive(clap::Args)]
pub struct DoctorArgs {
    /// Log files or run directories.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

/// Runs `contrai doctor`.
pub fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("the doctor is not built yet ({} paths given)", args.paths.len())
}
