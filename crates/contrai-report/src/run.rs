//! The report of a run: charts of every canonical series, phases, decisions and findings.

use std::collections::BTreeMap;
use std::path::Path;

use contrai_doctor::{DoctorConfig, Finding, Format, Label, Run, Series, XUnit, diagnose, read_path};

use crate::chart::{Band, Chart, Line, Marker, PALETTE, fmt_num};
use crate::page::{Page, classed};

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The log could not be read.
    #[error(transparent)]
    Read(#[from] contrai_doctor::ReadError),
    /// A run-directory file is malformed.
    #[error("{path}:{line}: {message}")]
    RunFile {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// What was wrong.
        message: String,
    },
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
struct RunExtras {
    phases: Vec<Phase>,
    decisions: Vec<Decision>,
    charts: Vec<Chart>,
}

/// A controller decision from `decisions.jsonl`.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The step.
    pub step: u64,
    /// What was decided.
    pub kind: String,
    /// Why.
    pub reason: String,
}

/// Renders the report of a log file or run directory (any format the doctor reads).
pub fn render(path: &Path, format: Option<Format>) -> Result<String, ReportError> {
    let runs = read_path(path, format)?;
    let RunExtras {
        phases,
        decisions,
        charts: extra,
    } = if path.is_dir() {
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
        run_section(&mut page, run, &phases, &decisions, &extra);
    }
    if path.is_dir() {
        data_section(&mut page, path)?;
        holdout_section(&mut page, path)?;
        compression_section(&mut page, path)?;
    }
    Ok(page.finish(&title))
}

fn run_section(page: &mut Page, run: &Run, phases: &[Phase], decisions: &[Decision], extra: &[Chart]) {
    let mut report = diagnose(run, &DoctorConfig::default());
    page.heading(&format!("{} [{}]", run.name, run.format));
    let explained = explained_by_rollbacks(&mut report.findings, decisions);
    let ok = !report.findings.iter().any(Finding::actionable);
    let labels = summary(&report.findings);
    let mut verdict = match (explained.is_empty(), ok) {
        (true, _) => report.verdict.clone(),
        (false, true) => "healthy".to_string(),
        (false, false) => "action needed".to_string(),
    };
    if !labels.is_empty() {
        verdict = format!("{verdict}: {labels}");
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
            .map(|d| vec![d.step.to_string(), d.kind.clone(), d.reason.clone()])
            .collect();
        page.table(&[unit, "decision", "reason"], &rows);
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
            d.kind.starts_with("rollback")
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

/// The labels of the findings, `healthy` left out (the verdict says it).
fn summary(findings: &[Finding]) -> String {
    let labels: Vec<String> = findings
        .iter()
        .map(|f| f.label.to_string())
        .filter(|l| l != "healthy")
        .collect();
    labels.join(", ")
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

/// One chart per group of series that the run has.
fn charts(
    run: &Run,
    unit: &str,
    findings: &[Finding],
    phases: &[Phase],
    decisions: &[Decision],
) -> Vec<Chart> {
    let groups: [(&str, &str, &[Series]); 4] = [
        ("Loss", "loss", &[Series::TrainLoss, Series::ValLoss]),
        (
            "Accuracy",
            "accuracy (fraction)",
            &[Series::TrainAccuracy, Series::ValAccuracy],
        ),
        ("Learning rate", "learning rate", &[Series::Lr]),
        ("Gradient norm", "global L2 norm", &[Series::GradNorm]),
    ];
    let bands = phase_bands(phases);
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
            label: format!("{}{more}", same.last().map_or("", |d| d.kind.as_str())),
            color: "#6a3d9a".into(),
        });
    }
    groups
        .iter()
        .enumerate()
        .filter_map(|(gi, (title, y, members))| {
            let lines: Vec<Line> = members
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let d = run.series.get(s)?;
                    Some(Line {
                        name: format!("{} ({})", s.name(), d.tag),
                        color: PALETTE[i].into(),
                        points: d.points.iter().map(|p| (p.step as f64, p.value)).collect(),
                        dots: d.points.len() < 60,
                    })
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
            };
            chart.has_data().then_some(chart)
        })
        .collect()
}

/// The split's partitions, what was dropped and the leak guard, from `data/manifest.json`.
fn data_section(page: &mut Page, dir: &Path) -> Result<(), ReportError> {
    let Some(m) = json_file(&dir.join("data/manifest.json"))? else {
        return Ok(());
    };
    page.heading("Data");
    let parts = m["partitions"].as_array().cloned().unwrap_or_default();
    let rows: Vec<Vec<String>> = parts
        .iter()
        .map(|p| vec![p["name"].as_str().unwrap_or("?").into(), p["count"].to_string()])
        .collect();
    page.table(&["partition", "samples"], &rows);
    if let Some(dropped) = m["dropped"].as_object() {
        let parts: Vec<String> = dropped
            .iter()
            .filter(|(_, n)| n.as_u64() != Some(0))
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        let guard = &m["guard"];
        page.para(&format!(
            "Dropped before training: {}. Leak guard: {} shared texts, {} cross-partition near-duplicate pairs ({}).",
            if parts.is_empty() { "nothing".to_string() } else { parts.join(", ") },
            guard["shared_content_hashes"],
            guard["cross_partition_near_pairs"],
            if guard["passed"] == true { "passed" } else { "FAILED" }
        ));
    }
    Ok(())
}

/// The single holdout evaluation, from `final/eval.json`.
fn holdout_section(page: &mut Page, dir: &Path) -> Result<(), ReportError> {
    let Some(e) = json_file(&dir.join("final/eval.json"))? else {
        return Ok(());
    };
    page.heading("Holdout (evaluated once, at the end)");
    let pct = |v| percent(v, "?");
    let num = |v: &serde_json::Value| v.as_f64().map_or("?".into(), fmt_num);
    page.table(
        &[
            "holdout accuracy",
            "holdout loss",
            "holdout samples",
            "val accuracy",
            "step",
        ],
        &[vec![
            pct(&e["holdout_accuracy"]),
            num(&e["holdout_loss"]),
            e["holdout_samples"].to_string(),
            pct(&e["val_accuracy"]),
            e["step"].to_string(),
        ]],
    );
    Ok(())
}

/// The final models side by side, from `final/model-card.json`: accuracy, zero weights,
/// parameters, bytes on disk and CPU latency of each variant (f32, int8, the student ...).
fn compression_section(page: &mut Page, dir: &Path) -> Result<(), ReportError> {
    let Some(c) = json_file(&dir.join("final/model-card.json"))? else {
        return Ok(());
    };
    let Some(variants) = c["variants"].as_array() else {
        return Ok(());
    };
    page.heading("Compression");
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "—".to_string(),
        serde_json::Value::Number(n) if n.is_u64() => n.to_string(),
        serde_json::Value::Number(n) => fmt_num(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let rows: Vec<Vec<String>> = variants
        .iter()
        .map(|v| {
            vec![
                text(&v["name"]),
                percent(&v["holdout_accuracy"], "—"),
                percent(&v["val_accuracy"], "—"),
                percent(&v["zero_weights"], "—").replace(".00 %", " %"),
                text(&v["parameters"]),
                text(&v["bytes"]),
                text(&v["latency_ms"]),
                match &v["file"] {
                    serde_json::Value::Null => text(&v["note"]),
                    f => format!("{} — {}", text(f), text(&v["note"])),
                },
            ]
        })
        .collect();
    let batch = text(&c["latency_batch"]);
    page.table(
        &[
            "model",
            "holdout accuracy",
            "val accuracy",
            "zero weights",
            "parameters",
            "bytes",
            &format!("CPU ms a batch of {batch}"),
            "file",
        ],
        &rows,
    );
    Ok(())
}

/// A fraction in a JSON value as a percentage with two decimals, or `missing`.
fn percent(v: &serde_json::Value, missing: &str) -> String {
    v.as_f64()
        .map_or(missing.into(), |x| format!("{:.2} %", 100.0 * x))
}

/// A JSON file's value; `None` when the file does not exist.
fn json_file(path: &Path) -> Result<Option<serde_json::Value>, ReportError> {
    let Ok(bytes) = std::fs::read(path) else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| ReportError::RunFile {
            path: path.display().to_string(),
            line: e.line(),
            message: format!("invalid JSON: {e}"),
        })
}

/// A Contrai run's phases (from `metrics.jsonl`'s `phase` field), decisions (from
/// `decisions.jsonl`) and the charts only it has: batch size and sparsity against steps.
fn run_dir_extras(dir: &Path) -> Result<RunExtras, ReportError> {
    let mut phases: Vec<Phase> = Vec::new();
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (_, row) in jsonl_rows(&dir.join("metrics.jsonl"))? {
        let (Some(step), Some(name)) = (
            row.get("step").and_then(|v| v.as_u64()),
            row.get("phase").and_then(|v| v.as_str()),
        ) else {
            continue;
        };
        for (k, v) in &row {
            if (k == "batch_size" || k.starts_with("sparsity"))
                && let Some(x) = v.as_f64()
            {
                series.entry(k.clone()).or_default().push((step as f64, x));
            }
        }
        match phases.last_mut() {
            Some(p) if p.name == name => p.to = p.to.max(step),
            _ => phases.push(Phase {
                name: name.into(),
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
                points: series[*k].clone(),
                dots: series[*k].len() < 60,
            })
            .collect(),
        bands: bands.clone(),
        markers: Vec::new(),
        log_y: Some(false),
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
    let mut decisions = Vec::new();
    let path = dir.join("decisions.jsonl");
    for (line, row) in jsonl_rows(&path)? {
        let step = row.get("step").and_then(|v| v.as_u64());
        let kind = row.get("kind").and_then(|v| v.as_str());
        match (step, kind) {
            (Some(step), Some(kind)) => decisions.push(Decision {
                step,
                kind: kind.into(),
                reason: row.get("reason").and_then(|v| v.as_str()).unwrap_or("").into(),
            }),
            _ => {
                return Err(ReportError::RunFile {
                    path: path.display().to_string(),
                    line,
                    message: "expected an object with `step` (integer) and `kind` (string)".into(),
                });
            }
        }
    }
    Ok(RunExtras {
        phases,
        decisions,
        charts,
    })
}

/// A JSONL object and its 1-based line.
type Row = (usize, BTreeMap<String, serde_json::Value>);

/// The JSON objects of a JSONL file with their line numbers; a missing file has none.
fn jsonl_rows(path: &Path) -> Result<Vec<Row>, ReportError> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(Vec::new());
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map(|row| (i + 1, row))
                .map_err(|e| ReportError::RunFile {
                    path: path.display().to_string(),
                    line: i + 1,
                    message: format!("invalid JSON: {e}"),
                })
        })
        .collect()
}
