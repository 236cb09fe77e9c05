//! `contrai report`: a self-contained HTML report of a run directory or any training log.

use std::path::PathBuf;
use std::process::ExitCode;

use contrai_doctor::Format;

/// Arguments of `contrai report`.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// A Contrai run directory, or any log `contrai doctor` reads (TensorBoard, trainer_state.json,
    /// a run on an MLflow tracking server, …).
    path: PathBuf,
    #[command(flatten)]
    tracking: crate::tracking::TrackingArgs,
    /// Output file [default: PATH/report.html for a directory, ./report.html for a file].
    #[arg(short, long)]
    out: Option<PathBuf>,
    /// The log format, when detection guesses wrong (as for `contrai doctor`).
    #[arg(long, value_name = "F", value_parser = crate::doctor_cmd::format_arg)]
    format: Option<Format>,
}

/// Runs `contrai report`.
pub fn run(mut args: ReportArgs) -> anyhow::Result<ExitCode> {
    args.path = args.tracking.resolve_one(&args.path)?;
    let html = contrai_report::render(&args.path, args.format)?;
    let out = args.out.unwrap_or_else(|| {
        if args.path.is_dir() {
            args.path.join("report.html")
        } else {
            PathBuf::from("report.html")
        }
    });
    contrai_base::write_atomic(&out, html.as_bytes())?;
    eprintln!("wrote {} ({} KB)", out.display(), html.len() / 1024);
    Ok(ExitCode::SUCCESS)
}
