//! `contrai doctor`: diagnose training logs of any framework, once or while they grow.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use contrai_doctor::{
    Detail, DoctorConfig, Finding, Format, Live, Report, Run, Series, Skipped, diagnose, read_path_noting,
};

/// Arguments of `contrai doctor`.
#[derive(clap::Args)]
pub struct DoctorArgs {
    /// Log files or run directories (TensorBoard, trainer_state.json, CSV, W&B run folders and
    /// CSV exports, MLflow's file store and mlflow.db, Trackio databases, Burn metric logs, JSONL, Keras histories saved as JSON), runs on an
    /// MLflow tracking server: `mlflow://HOST:PORT/RUN_ID` (or an experiment's id or name;
    /// `mlflow://HOST:PORT/` for every run), `mlflow:RUN_ID` with --tracking-uri; a Trackio
    /// project: `trackio:PROJECT`.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    tracking: crate::tracking::TrackingArgs,
    /// Print JSON: {"runs":[{"name","source","verdict","task","setup","findings":[{"label",
    /// "severity","step","evidence","recommendation","confidence","detail"}]}],
    /// "skipped":[{"path","reason"}]} (files under a folder that gave no run).
    #[arg(long)]
    json: bool,
    /// Force the format: tensorboard, hf_trainer_state, csv, wandb (run files), wandb_csv, mlflow,
    /// mlflow_db, trackio, burn, jsonl, keras_json.
    #[arg(long, value_name = "F", value_parser = format_arg)]
    format: Option<Format>,
    /// Follow logs that are still being written; print each new finding once (`--watch`, its
    /// old name, still works; the live page is `contrai watch`).
    #[arg(long, alias = "watch")]
    follow: bool,
    /// With --follow: stop after this many seconds without the logs changing.
    #[arg(long, value_name = "N", default_value_t = 600)]
    idle_secs: u64,
    /// The run clips the global gradient norm at this value (HF `max_grad_norm`, Lightning
    /// `gradient_clip_val`): a passing spike that clipping bounded is then reported as information.
    /// Contrai's own run directories say so themselves.
    #[arg(long, value_name = "C")]
    clip_norm: Option<f64>,
}

/// Reads the runs of `path`, with what the command line says about them, and the files under
/// it that gave no run.
fn read(args: &DoctorArgs, path: &Path) -> Result<(Vec<Run>, Vec<Skipped>), contrai_doctor::ReadError> {
    let (mut runs, skipped) = read_path_noting(path, args.format)?;
    if let Some(c) = args.clip_norm.filter(|c| c.is_finite() && *c > 0.0) {
        runs.iter_mut().for_each(|r| r.hints.clip_norm = Some(c));
    }
    Ok((runs, skipped))
}

/// Parses `--format` for clap, listing the formats on error.
pub fn format_arg(s: &str) -> Result<Format, String> {
    Format::parse(s).ok_or_else(|| {
        let known: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
        format!("unknown format `{s}` ({})", known.join(", "))
    })
}

/// Runs `contrai doctor`.
pub fn run(mut args: DoctorArgs) -> anyhow::Result<ExitCode> {
    args.paths = args.tracking.resolve(&args.paths)?;
    if args.follow {
        return follow(&args);
    }
    let cfg = DoctorConfig::default();
    let (mut runs, mut skipped) = (Vec::new(), Vec::new());
    for p in &args.paths {
        let (r, s) = read(&args, p)?;
        runs.extend(r);
        skipped.extend(s);
    }
    let reports: Vec<Report> = runs.iter().map(|r| diagnose(r, &cfg)).collect();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "runs": reports, "skipped": skipped }))?
        );
    } else {
        print!("{}", text_report(&runs, &reports));
        for s in &skipped {
            println!("skipped {}: {}", s.path.display(), s.reason);
        }
    }
    Ok(exit_code(&reports))
}

fn exit_code(reports: &[Report]) -> ExitCode {
    if reports.iter().any(Report::needs_action) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        format!("{x}")
    } else if x.fract() == 0.0 && x.abs() < 1e12 {
        format!("{x:.0}")
    } else if x.abs() < 1e-3 || x.abs() >= 1e5 {
        format!("{x:.3e}")
    } else {
        format!("{x:.4}")
    }
}

fn verdict_line(report: &Report) -> String {
    let actionable: Vec<&Finding> = report.findings.iter().filter(|f| f.actionable()).collect();
    if actionable.is_empty() {
        "healthy".to_string()
    } else {
        let labels: Vec<String> = actionable
            .iter()
            .map(|f| format!("{} (step {})", f.label, f.step))
            .collect();
        format!("action needed: {}", labels.join(", "))
    }
}

fn finding_text(f: &Finding) -> String {
    let mut ev: Vec<String> = f
        .evidence
        .iter()
        .map(|(k, v)| format!("{k}={}", fmt_num(*v)))
        .collect();
    if let Some(Detail::Setting(s)) = &f.detail {
        ev.push(format!("{}: {} ({})", s.key, s.value, s.file));
    }
    format!(
        "  [{}] {} from step {} ({} confidence)\n      {}\n      evidence: {}\n",
        f.severity,
        f.label,
        f.step,
        f.confidence,
        f.recommendation,
        ev.join(" ")
    )
}

fn series_summary(run: &Run) -> String {
    let mut out = String::new();
    for s in Series::ALL {
        let Some(d) = run.series.get(&s) else {
            continue;
        };
        let pts = &d.points;
        let (Some(first), Some(last)) = (pts.first(), pts.last()) else {
            continue;
        };
        let finite: Vec<_> = pts.iter().filter(|p| p.value.is_finite()).collect();
        let nonfinite = pts.len() - finite.len();
        let min = finite
            .iter()
            .min_by(|a, b| a.value.total_cmp(&b.value))
            .map(|p| format!("{}@{}", fmt_num(p.value), p.step))
            .unwrap_or_else(|| "-".to_string());
        out.push_str(&format!(
            "    {:<15} {:<24} {:>6} pts  steps {}..{}  first {}  min {}  last {}{}\n",
            s.name(),
            format!("({})", d.tag),
            pts.len(),
            first.step,
            last.step,
            fmt_num(first.value),
            min,
            fmt_num(last.value),
            if nonfinite > 0 {
                format!("  non-finite {nonfinite}")
            } else {
                String::new()
            }
        ));
    }
    out
}

fn text_report(runs: &[Run], reports: &[Report]) -> String {
    let bad = reports.iter().filter(|r| r.needs_action()).count();
    let mut out = if bad == 0 {
        format!("verdict: healthy ({} run(s))\n", reports.len())
    } else {
        format!("verdict: action needed ({bad} of {} run(s))\n", reports.len())
    };
    for (run, rep) in runs.iter().zip(reports) {
        out.push_str(&format!(
            "\n== {} [{}] {}\n  task: {}\n",
            rep.name,
            run.format,
            rep.source,
            rep.task_line()
        ));
        if let Some(setup) = rep.setup_line() {
            out.push_str(&format!("  setup: {setup}\n"));
        }
        out.push_str(&format!("  verdict: {}\n", verdict_line(rep)));
        for p in &rep.partial {
            out.push_str(&format!(
                "  read in part: {} at {}: {} (every finding a notch less sure)\n",
                p.file, p.at, p.what
            ));
        }
        for f in &rep.findings {
            out.push_str(&finding_text(f));
        }
        out.push_str("  series:\n");
        out.push_str(&series_summary(run));
    }
    out
}

/// Follows growing logs: each poll reads only what was written since the last one and feeds the
/// new points to a live doctor per run, printing each new finding once.
fn follow(args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    let idle = Duration::from_secs(args.idle_secs);
    let mut live = Live::new(&args.paths, args.format, DoctorConfig::default()).clip_norm(args.clip_norm);
    let mut prints: HashSet<String> = HashSet::new();
    let mut prints_err: HashSet<String> = HashSet::new();
    let mut last_change = Instant::now();
    eprintln!(
        "watching {} path(s); stops after {} s without change or on Ctrl-C",
        args.paths.len(),
        args.idle_secs
    );
    loop {
        let (changed, fresh) = live.poll();
        if changed {
            last_change = Instant::now();
        }
        for (run, f) in fresh {
            emit(args.json, &run, &f, &mut prints)?;
        }
        // A file that does not exist yet or holds no metrics yet: keep waiting.
        for (_, why) in live.waiting() {
            if prints_err.insert(why.to_string()) {
                eprintln!("waiting: {why}");
            }
        }
        if last_change.elapsed() >= idle {
            break;
        }
        std::thread::sleep(Duration::from_millis(500).min(idle));
    }
    for (run, f) in live.finish() {
        emit(args.json, &run, &f, &mut prints)?;
    }
    let runs: Vec<Run> = live.runs().iter().map(|r| r.run.clone()).collect();
    let reports: Vec<Report> = live.runs().iter().map(|r| r.report.clone()).collect();
    if reports.is_empty() {
        anyhow::bail!(
            "no readable training log appeared under {} within {} s",
            args.paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            args.idle_secs
        );
    }
    if args.json {
        // One line, so that a watch stream is JSON lines throughout.
        println!(
            "{}",
            serde_json::to_string(&serde_json::json!({ "runs": reports }))?
        );
    } else {
        print!("{}", text_report(&runs, &reports));
    }
    Ok(exit_code(&reports))
}

fn emit(json: bool, run: &str, f: &Finding, seen: &mut HashSet<String>) -> anyhow::Result<()> {
    if !seen.insert(format!("{run}\u{0}{}", f.label)) {
        return Ok(());
    }
    if json {
        println!(
            "{}",
            serde_json::to_string(&serde_json::json!({ "run": run, "finding": f }))?
        );
    } else {
        println!(
            "[{run}] {} {} from step {} ({} confidence): {}",
            f.severity, f.label, f.step, f.confidence, f.recommendation
        );
    }
    Ok(())
}
