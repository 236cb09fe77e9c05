//! `contrai watch`: a live page of a run as it trains, from any framework's log.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use contrai_doctor::Format;
use contrai_watch::{Options, Watch};

use crate::doctor_cmd::format_arg;

/// Arguments of `contrai watch`.
#[derive(clap::Args)]
pub struct WatchArgs {
    /// Run directories or logs to follow: a Contrai run, an HF output_dir, a Lightning
    /// version_N, a TensorBoard log directory, any log `contrai doctor` reads. Several are shown
    /// side by side. A path that does not exist yet is waited for. A run on an MLflow tracking
    /// server: `mlflow://HOST:PORT/RUN_ID` (or `mlflow:RUN_ID` with --tracking-uri); a Trackio
    /// project: `trackio:PROJECT`.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    tracking: crate::tracking::TrackingArgs,
    /// The port to listen on (0: any free one; the address is printed).
    #[arg(long, default_value_t = 8765)]
    port: u16,
    /// The interface to listen on. Anything but this machine's loopback requires the access
    /// token printed at start (in the URL, `?token=`). Over SSH, prefer the default and
    /// `ssh -L 8765:127.0.0.1:8765 host`.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Force the format: tensorboard, hf_trainer_state, csv, wandb (run files), wandb_csv, mlflow,
    /// mlflow_db, trackio, burn, jsonl, keras_json.
    #[arg(long, value_name = "F", value_parser = format_arg)]
    format: Option<Format>,
}

/// Runs `contrai watch` until Ctrl-C.
pub fn run(args: WatchArgs) -> anyhow::Result<ExitCode> {
    let loopback = matches!(args.host.as_str(), "127.0.0.1" | "localhost" | "::1");
    let token = if loopback {
        None
    } else {
        Some(contrai_watch::new_token()?)
    };
    let watch = Watch::bind(Options {
        paths: args.tracking.resolve(&args.paths)?,
        format: args.format,
        host: args.host.clone(),
        port: args.port,
        token: token.clone(),
    })?;
    let port = watch.addr().map_or(args.port, |a| a.port());
    let host = if loopback { "127.0.0.1" } else { &args.host };
    let query = token.map(|t| format!("?token={t}")).unwrap_or_default();
    println!(
        "contrai watch: serving http://{}/{query} (Ctrl-C to stop)",
        contrai_watch::server::socket_addr(host, port)
    );
    std::io::stdout().flush()?;
    watch.serve()?;
    Ok(ExitCode::SUCCESS)
}
