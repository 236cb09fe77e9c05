//! The report of a run: charts of every canonical series, phases, decisions and findings.

use std::collections::BTreeMap;
use std::path::Path;

use contrai_data::split::Manifest;
use contrai_doctor::{DoctorConfig, Finding, Format, Label, Report, Run, Series, XUnit, diagnose, read_path};
use contrai_run::{Decision, FinalEval, MetricsRow, ModelCard, RunDir, RunError, RunFormat};

use crate::chart::{Band, Chart, Line, Marker, PALETTE, downsample, fmt_num};

/// Points drawn of a line at most (a million-point log is drawn from a few thousand).
const MAX_DRAWN: usize = 2000;
use crate::page::{Page, classed};

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The log could not be read.
    #[error(transparent)]
    Read(#[from] contrai_doctor::ReadError),
    /// A run-directory file is malformed, or of another format version.
    #[error(transparent)]
    RunFile(#[from] RunError),
}

/// A phase of a Contrai run: a name over a step range.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// `validate`, `main`, `diagnose`, `contract` or `refine`.
    pub name: String,
    /// First step.
    pub from: u64,
    /// Last step.
    pub to: u64,
}

/// What a Contrai run directory adds to its log: phases, decisions, batch-size and sparsity charts.
#[derive(Default)]
pub struct RunExtras {
    /// The phases, from `metrics.jsonl`.
    pub phases: Vec<Phase>,
    /// The controller's decisions, from `decisions.jsonl`.
    pub decisions: Vec<Decision>,
    /// Charts only a Contrai run has (batch size, sparsity).
    pub charts: Vec<Chart>,
}

/// Whether `path` is a Contrai run directory (`run.json`, or `recipe.toml` before it existed),
/// not just a folder of logs.
pub fn is_run_dir(path: &Path) -> bool {
    let run = RunDir::new(path);
    path.is_dir() && (run.format().is_file() || run.recipe().is_file())
}

/// Renders the report of a log file or run directory (any format the doctor reads).
pub fn render(path: &Path, format: Option<Format>) -> Result<String, ReportError> {
    if is_run_dir(path) {
        RunFormat::check(&RunDir::new(path))?;
    }
    let runs = read_path(path, format)?;
    let extras = if is_run_dir(path) {
        run_dir_extras(path)?
    } else {
        RunExtras::default()
    };
    let title = format!("Contrai report: {}", path.display());
    let mut page = Page::new(
        &title,
        &format!("{} run(s) read from {}", runs.len(), path.display()),
    );
    for run in &runs {
        run_section(&mut page, run, diagnose(run, &DoctorConfig::default()), &extras);
    }
    if is_run_dir(path) {
        data_section(&mut page, path)?;
        holdout_section(&mut page, path)?;
        compression_section(&mut page, path)?;
    }
    Ok(page.finish(&title))
}

/// A run's section: its verdict, charts, findings (the doctor's `report`), decisions and series.
pub fn run_section(page: &mut Page, run: &Run, mut report: Report, extras: &RunExtras) {
    let RunExtras {
        phases,
        decisions,
        charts: extra,
    } = extras;
    page.heading(&format!("{} [{}]", run.name, run.format));
    let explained = explained_by_rollbacks(&mut report.findings, decisions);
    let ok = !report.findings.iter().any(Finding::actionable);
    let mut verdict = match (explained.is_empty(), ok) {
        (true, _) => report.verdict.clone(),
        (false, true) => "healthy".to_string(),
        (false, false) => "action needed".to_string(),
    };
    let (actions, notes) = summary(&report.findings);
    if !actions.is_empty() {
        verdict = format!("{verdict}: {actions}");
    }
    if !notes.is_empty() {
        verdict = format!("{verdict} (for information: {notes})");
    }
    if !explained.is_empty() {
        verdict = format!("{verdict} ({})", explained.join("; "));
    }
    page.verdict(&verdict, ok);
    let unit = match run.hints.x_unit {
        XUnit::Step => "step",
        XUnit::Epoch => "epoch",
    };
    for chart in charts(run, unit, &report.findings, phases, decisions) {
        page.raw(&chart.svg());
    }
    for chart in extra {
        page.raw(&chart.svg());
    }
    page.heading("Findings");
    let rows: Vec<Vec<String>> = report
        .findings
        .iter()
        .map(|f| {
            let sev = f.severity.to_string();
            let ev: Vec<String> = f
                .evidence
                .iter()
                .map(|(k, v)| format!("{k}={}", fmt_num(*v)))
                .collect();
            vec![
                classed(&format!("sev-{sev}"), &sev),
                f.label.to_string(),
                f.step.to_string(),
                f.recommendation.clone(),
                classed("ev", &ev.join(" ")),
            ]
        })
        .collect();
    page.table(
        &["severity", "finding", unit, "recommendation", "evidence"],
        &rows,
    );
    if !decisions.is_empty() {
        page.heading("Controller decisions");
        let rows: Vec<Vec<String>> = decisions
            .iter()
            .map(|d| {
                let evidence = classed("ev", &d.evidence.to_string());
                vec![d.step.to_string(), d.kind.to_string(), d.reason.clone(), evidence]
            })
            .collect();
        page.table(&[unit, "decision", "reason", "evidence"], &rows);
    }
    page.heading("Series");
    let rows: Vec<Vec<String>> = run
        .series
        .iter()
        .filter_map(|(s, d)| {
            let finite: Vec<f64> = d
                .points
                .iter()
                .map(|p| p.value)
                .filter(|v| v.is_finite())
                .collect();
            let last = d.points.last()?;
            let min = finite.iter().copied().fold(f64::NAN, f64::min);
            Some(vec![
                s.name().into(),
                d.tag.clone(),
                d.points.len().to_string(),
                fmt_num(min),
                fmt_num(last.value),
                last.step.to_string(),
            ])
        })
        .collect();
    page.table(
        &[
            "series",
            "logged as",
            "points",
            "min",
            "last",
            &format!("last {unit}"),
        ],
        &rows,
    );
}

/// Loss spikes and gradient jumps within a few steps after a controller rollback are the
/// rollback itself (the weights went back): they are taken out of the findings, and described.
fn explained_by_rollbacks(findings: &mut Vec<Finding>, decisions: &[Decision]) -> Vec<String> {
    let mut out = Vec::new();
    findings.retain(|f| {
        let after = decisions.iter().find(|d| {
            d.is_rollback()
                && matches!(f.label, Label::LossSpike | Label::GradExplode)
                && (d.step..=d.step + 5).contains(&f.step)
        });
        if let Some(d) = after {
            out.push(format!(
                "{} at step {} follows {} at step {}",
                f.label, f.step, d.kind, d.step
            ));
        }
        after.is_none()
    });
    out
}

/// The labels of the findings that need action, and of those for information (`healthy` left
/// out: the verdict says it).
fn summary(findings: &[Finding]) -> (String, String) {
    let labels = |actionable: bool| -> String {
        let l: Vec<String> = findings
            .iter()
            .filter(|f| f.label != Label::Healthy && f.actionable() == actionable)
            .map(|f| f.label.to_string())
            .collect();
        l.join(", ")
    };
    (labels(true), labels(false))
}

/// The phases as shaded bands.
fn phase_bands(phases: &[Phase]) -> Vec<Band> {
    phases
        .iter()
        .enumerate()
        .map(|(i, p)| Band {
            from: p.from as f64,
            to: p.to as f64,
            label: p.name.clone(),
            color: ["#f3e9c6", "#dbe9f6", "#e6f0dc", "#f6dde0", "#e8e0f3"][i % 5].into(),
        })
        .collect()
}

/// The charts: title, y-axis label and the series each shows.
const GROUPS: [(&str, &str, &[Series]); 4] = [
    ("Loss", "loss", &[Series::TrainLoss, Series::ValLoss]),
    (
        "Accuracy",
        "accuracy (fraction)",
        &[Series::TrainAccuracy, Series::ValAccuracy],
    ),
    ("Learning rate", "learning rate", &[Series::Lr]),
    ("Gradient norm", "global L2 norm", &[Series::GradNorm]),
];

/// A series of a run as a line of a chart (drawn from at most [`MAX_DRAWN`] points).
fn line(run: &Run, s: Series, name: String, color: &str) -> Option<Line> {
    let d = run.series.get(&s)?;
    let points: Vec<(f64, f64)> = d.points.iter().map(|p| (p.step as f64, p.value)).collect();
    Some(Line {
        name,
        color: color.into(),
        points: downsample(&points, MAX_DRAWN),
        dots: d.points.len() < 60,
    })
}

/// Several runs side by side: one chart per group of series, a line per run and series.
pub fn compared(runs: &[&Run], unit: &str) -> Vec<Chart> {
    GROUPS
        .iter()
        .filter_map(|(title, y, members)| {
            let lines = runs
                .iter()
                .enumerate()
                .flat_map(|(k, run)| {
                    members.iter().enumerate().filter_map(move |(i, s)| {
                        let color = PALETTE[(k * members.len() + i) % PALETTE.len()];
                        line(run, *s, format!("{}: {}", run.name, s.name()), color)
                    })
                })
                .collect();
            let chart = Chart {
                title: format!("{title}, compared"),
                x_label: unit.to_string(),
                y_label: y.to_string(),
                lines,
                ..Chart::default()
            };
            chart.has_data().then_some(chart)
        })
        .collect()
}

/// One chart per group of series that the run has.
fn charts(
    run: &Run,
    unit: &str,
    findings: &[Finding],
    phases: &[Phase],
    decisions: &[Decision],
) -> Vec<Chart> {
    let bands = phase_bands(phases);
    // Every chart of the run on the same steps, whichever series it shows.
    let steps = run
        .series
        .values()
        .flat_map(|d| [d.points.first(), d.points.last()])
        .flatten();
    let span = steps.fold(None, |s: Option<(f64, f64)>, p| {
        let x = p.step as f64;
        Some(s.map_or((x, x), |(a, b)| (a.min(x), b.max(x))))
    });
    let mut markers: Vec<Marker> = findings
        .iter()
        .filter(|f| f.actionable())
        .map(|f| Marker {
            x: f.step as f64,
            label: f.label.to_string(),
            color: "#b00020".into(),
        })
        .collect();
    // Decisions taken at one step (a phase boundary) share one marker.
    for same in decisions.chunk_by(|a, b| a.step == b.step) {
        let more = if same.len() > 1 {
            format!(" +{}", same.len() - 1)
        } else {
            String::new()
        };
        markers.push(Marker {
            x: same[0].step as f64,
            label: format!("{}{more}", same.last().map_or("", |d| d.kind.as_ref())),
            color: "#6a3d9a".into(),
        });
    }
    GROUPS
        .iter()
        .enumerate()
        .filter_map(|(gi, (title, y, members))| {
            let lines: Vec<Line> = members
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let tag = &run.series.get(s)?.tag;
                    line(run, *s, format!("{} ({tag})", s.name()), PALETTE[i])
                })
                .collect();
            let chart = Chart {
                title: title.to_string(),
                x_label: unit.to_string(),
                y_label: y.to_string(),
                lines,
                bands: bands.clone(),
                markers: if gi == 0 { markers.clone() } else { Vec::new() },
                log_y: None,
                x_span: span,
            };
            chart.has_data().then_some(chart)
        })
        .collect()
}

/// The split's partitions, what was dropped and the leak guard, from `data/manifest.json`.
fn data_section(page: &mut Page, dir: &Path) -> Result<(), ReportError> {
    let Some(m) = contrai_run::read_json_if::<Manifest>(&RunDir::new(dir).data().join("manifest.json"))?
    else {
        return Ok(());
    };
    page.heading("Data");
    let rows: Vec<Vec<String>> = m
        .partitions
        .iter()
        .map(|p| vec![p.name.clone(), p.count.to_string()])
        .collect();
    page.table(&["partition", "samples"], &rows);
    let parts: Vec<String> = m
        .dropped
        .iter()
        .filter(|(_, n)| **n != 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    let g = &m.guard;
    page.para(&format!(
        "Dropped before training: {}. Leak guard: {} shared texts, {} cross-partition near-duplicate pairs ({}).",
        if parts.is_empty() { "nothing".to_string() } else { parts.join(", ") },
        g.shared_content_hashes,
        g.cross_partition_near_pairs,
        if g.passed { "passed" } else { "FAILED" }
    ));
    Ok(())
}

/// The single holdout evaluation, from `final/eval.json`.
fn holdout_section(page: &mut Page, dir: &Path) -> Result<(), ReportError> {
    let Some(e) = contrai_run::read_json_if::<FinalEval>(&RunDir::new(dir).eval())? else {
        return Ok(());
    };
    page.heading("Holdout (evaluated once, at the end)");
    page.table(
        &[
            "holdout accuracy",
            "holdout loss",
            "holdout samples",
            "val accuracy",
            "step",
        ],
        &[vec![
            percent(e.holdout_accuracy),
            fmt_num(f64::from(e.holdout_loss)),
            e.holdout_samples.to_string(),
            percent(e.val_accuracy),
            e.step.to_string(),
        ]],
    );
    Ok(())
}

/// The final models side by side, from `final/model-card.json`: accuracy, zero weights,
/// parameters, bytes on disk and CPU latency of each variant (f32, int8, the student ...).
fn compression_section(page: &mut Page, dir: &Path) -> Result<(), ReportError> {
    let Some(c) = contrai_run::read_json_if::<ModelCard>(&RunDir::new(dir).model_card())? else {
        return Ok(());
    };
    page.heading("Compression");
    let rows: Vec<Vec<String>> = c
        .variants
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                percent(v.holdout_accuracy),
                percent(v.val_accuracy),
                format!("{:.2} %", 100.0 * v.zero_weights).replace(".00 %", " %"),
                v.parameters.to_string(),
                v.bytes.to_string(),
                v.latency_ms.map_or("—".into(), fmt_num),
                match &v.file {
                    None => v.note.clone(),
                    Some(f) => format!("{f} — {}", v.note),
                },
            ]
        })
        .collect();
    page.table(
        &[
            "model",
            "holdout accuracy",
            "val accuracy",
            "zero weights",
            "parameters",
            "bytes",
            &format!("CPU ms a batch of {}", c.latency_batch),
            "file",
        ],
        &rows,
    );
    Ok(())
}

/// A fraction as a percentage with two decimals ("—" when not a number).
fn percent(v: f32) -> String {
    if v.is_finite() {
        format!("{:.2} %", 100.0 * v)
    } else {
        "—".into()
    }
}

/// A Contrai run's phases (from `metrics.jsonl`'s `phase` field), decisions (from
/// `decisions.jsonl`) and the charts only it has: batch size and sparsity against steps.
pub fn run_dir_extras(dir: &Path) -> Result<RunExtras, ReportError> {
    let run = RunDir::new(dir);
    let mut phases: Vec<Phase> = Vec::new();
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut point = |k: String, step: u64, x: f64| series.entry(k).or_default().push((step as f64, x));
    for (_, row) in contrai_run::read_jsonl(&run.metrics(), None, MetricsRow::parse)? {
        let step = row.step();
        match &row {
            MetricsRow::Train(r) => point("batch_size".into(), step, r.batch_size as f64),
            MetricsRow::Sparsity(r) => {
                point("sparsity".into(), step, r.overall);
                for (m, x) in &r.modules {
                    point(format!("sparsity/{m}"), step, *x);
                }
            }
            _ => {}
        }
        let name = row.phase().to_string();
        match phases.last_mut() {
            Some(p) if p.name == name => p.to = p.to.max(step),
            _ => phases.push(Phase {
                name,
                from: step,
                to: step,
            }),
        }
    }
    let bands = phase_bands(&phases);
    let chart = |title: &str, y: &str, keys: Vec<&String>| Chart {
        title: title.into(),
        x_label: "step".into(),
        y_label: y.into(),
        lines: keys
            .iter()
            .enumerate()
            .map(|(i, k)| Line {
                name: k.to_string(),
                color: PALETTE[i % PALETTE.len()].into(),
                points: downsample(&series[*k], MAX_DRAWN),
                dots: series[*k].len() < 60,
            })
            .collect(),
        bands: bands.clone(),
        markers: Vec::new(),
        log_y: Some(false),
        x_span: None,
    };
    let batch: Vec<&String> = series.keys().filter(|k| *k == "batch_size").collect();
    let sparsity: Vec<&String> = series.keys().filter(|k| k.starts_with("sparsity")).collect();
    let charts: Vec<Chart> = [
        chart("Batch size", "samples an optimizer step", batch),
        chart("Sparsity", "share of zero weights", sparsity),
    ]
    .into_iter()
    .filter(Chart::has_data)
    .collect();
    let decisions = contrai_run::journal::read_rows::<Decision>(&run.decisions())?
        .into_iter()
        .map(|(_, d)| d)
        .collect();
    Ok(RunExtras {
        phases,
        decisions,
        charts,
    })
}
