//! What the live page shows: the followed runs with their live doctors, a Contrai run's phases
//! and decisions, each run's pace and time left, rendered with the report's own sections.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use contrai_doctor::{DoctorConfig, Format, Live, LiveRun, Run, Series, XUnit};
use contrai_report::chart::esc;
use contrai_report::page::Page;
use contrai_report::{RunExtras, compared, is_run_dir, run_dir_extras, run_section};
use contrai_run::RunDir;

/// How long a log may stop growing before the page says so.
const QUIET: Duration = Duration::from_secs(60);
/// The window the pace is measured over.
const PACE_WINDOW: Duration = Duration::from_secs(120);

/// The formats a watched path may hold, for a path that holds none yet.
pub const LOOKING_FOR: &str = "a Contrai run directory (metrics.jsonl), TensorBoard event files (events.out.tfevents.*), a Hugging Face trainer_state.json, a Lightning metrics.csv or any CSV with a loss column, JSON lines, an MLflow run, Burn metric logs or a W&B CSV export";

/// One rendering of the page's live part.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Counts the renderings; the page shows the newest.
    pub version: u64,
    /// The live part's HTML.
    pub html: String,
    /// The highest step any run has reached.
    pub last_step: u64,
    /// The page's title.
    pub title: String,
}

/// A run's progress as the log grew: (when, highest step) samples over the pace window.
#[derive(Default)]
struct Progress {
    samples: VecDeque<(Instant, u64)>,
}

impl Progress {
    fn record(&mut self, step: u64) {
        let now = Instant::now();
        if self.samples.back().is_none_or(|s| s.1 != step) {
            self.samples.push_back((now, step));
        }
        while self.samples.len() > 2 && self.samples.front().is_some_and(|s| now - s.0 > PACE_WINDOW) {
            self.samples.pop_front();
        }
    }

    /// Steps a second over the window, once the log has grown twice since it was first read.
    fn pace(&self) -> Option<f64> {
        let (first, last) = (self.samples.get(1)?, self.samples.back()?);
        let secs = (last.0 - first.0).as_secs_f64();
        (secs > 0.5 && last.1 > first.1).then(|| (last.1 - first.1) as f64 / secs)
    }
}

/// The runs followed, and what the page says of them.
pub struct Board {
    live: Live,
    /// Per followed path, a Contrai run's phases and decisions.
    extras: Vec<RunExtras>,
    /// Per followed path, the size and time of its `decisions.jsonl` when last read.
    journals: Vec<Option<(u64, SystemTime)>>,
    /// Each run's progress, by its path and name (its place in the runs moves when one goes).
    progress: HashMap<(usize, String), Progress>,
    changed_at: Instant,
    version: u64,
}

impl Board {
    /// Follows `paths`, each read as `format` (detected when `None`).
    pub fn new(paths: &[PathBuf], format: Option<Format>) -> Board {
        Board {
            live: Live::new(paths, format, DoctorConfig::default()),
            extras: paths.iter().map(|_| RunExtras::default()).collect(),
            journals: vec![None; paths.len()],
            progress: HashMap::new(),
            changed_at: Instant::now(),
            version: 0,
        }
    }

    /// Reads what the logs gained; true when the page must change.
    pub fn poll(&mut self) -> bool {
        let (mut changed, _) = self.live.poll();
        let paths: Vec<PathBuf> = self.live.paths().map(Path::to_path_buf).collect();
        for (i, p) in paths.iter().enumerate() {
            // A run directory's decisions are few: read whole when they or its metrics change.
            let journal = stamp(&RunDir::new(p).decisions());
            if (changed || journal != self.journals[i])
                && is_run_dir(p)
                && let Ok(e) = run_dir_extras(p)
            {
                self.extras[i] = e;
                self.journals[i] = journal;
                changed = true;
            }
        }
        if !changed {
            return false;
        }
        self.changed_at = Instant::now();
        for r in self.live.runs() {
            let key = (r.path, r.run.name.clone());
            self.progress.entry(key).or_default().record(last_step(&r.run));
        }
        true
    }

    /// The runs followed so far.
    pub fn runs(&self) -> impl Iterator<Item = &Run> {
        self.live.runs().iter().map(|r| &r.run)
    }

    /// Bytes read from the logs so far.
    pub fn bytes_read(&self) -> u64 {
        self.live.bytes_read()
    }

    /// The page's live part as it stands.
    pub fn render(&mut self) -> Snapshot {
        self.version += 1;
        let names: Vec<String> = self.live.paths().map(|p| p.display().to_string()).collect();
        let title = format!("Contrai watch: {}", names.join(", "));
        let mut page = Page::new(&title, &self.status_line());
        for (p, why) in self.live.waiting() {
            page.raw(&format!(
                "<p class=\"waiting\">Waiting for {}: {}. Looking for {LOOKING_FOR}.</p>",
                esc(&p.display().to_string()),
                esc(why)
            ));
        }
        let runs: Vec<&Run> = self.runs().collect();
        if runs.len() > 1 {
            page.heading("Runs compared");
            page.raw("<section data-run=\"*\">");
            for c in compared(&runs, unit(runs[0])) {
                page.raw(&c.svg());
            }
            page.raw("</section>");
        }
        for (k, r) in self.live.runs().iter().enumerate() {
            page.raw(&format!("<section data-run=\"{k}\">"));
            page.para(&self.progress_line(k));
            run_section(&mut page, &r.run, r.report.clone(), &self.extras[r.path]);
            page.raw("</section>");
        }
        Snapshot {
            version: self.version,
            html: page.into_body(),
            last_step: runs.iter().map(|r| last_step(r)).max().unwrap_or(0),
            title,
        }
    }

    /// Whether the logs are growing, and since when they are not.
    fn status_line(&self) -> String {
        let quiet = self.changed_at.elapsed();
        let runs = self.live.runs().len();
        if runs == 0 {
            return "no run yet: waiting for a log to appear".into();
        }
        if self.live.paths().all(finished) {
            return format!("{runs} run(s); the run has ended: its final evaluation is written");
        }
        if quiet > QUIET {
            format!(
                "{runs} run(s); the logs have not grown for {} — the run may have ended or stalled",
                human(quiet)
            )
        } else {
            format!("{runs} run(s); following the logs as they grow")
        }
    }

    /// A run's step, pace and time left.
    fn progress_line(&self, k: usize) -> String {
        let LiveRun { path, run, .. } = &self.live.runs()[k];
        let step = last_step(run);
        let total = run.hints.total_steps.filter(|t| *t > 0);
        let mut line = match total {
            Some(t) if step >= t => format!("Finished: step {step} of {t}."),
            Some(t) => format!("Step {step} of {t}."),
            None => format!("Step {step} (the log does not say its total)."),
        };
        let progress = self.progress.get(&(*path, run.name.clone()));
        if let Some(pace) = progress.and_then(Progress::pace) {
            line.push_str(&format!(" Pace {} steps/s", contrai_report::chart::fmt_num(pace)));
            if let Some(t) = total.filter(|t| *t > step) {
                let left = Duration::from_secs_f64((t - step) as f64 / pace);
                line.push_str(&format!(", about {} left", human(left)));
            }
            line.push('.');
        }
        line
    }

    /// The raw values of run `k`'s series (every run's for `None`) at the logged step nearest `x`.
    pub fn values_at(&self, k: Option<usize>, x: f64) -> serde_json::Value {
        let rows: Vec<serde_json::Value> = self
            .live
            .runs()
            .iter()
            .enumerate()
            .filter(|(i, _)| k.is_none_or(|k| k == *i))
            .flat_map(|(_, r)| {
                Series::ALL.iter().filter_map(move |s| {
                    let d = r.run.series.get(s)?;
                    let p = nearest(&d.points, x)?;
                    let value = if p.value.is_finite() { serde_json::json!(p.value) } else { serde_json::json!(p.value.to_string()) };
                    Some(serde_json::json!({"run": r.run.name, "series": s.name(), "tag": d.tag, "step": p.step, "value": value}))
                })
            })
            .collect();
        serde_json::json!({ "values": rows })
    }
}

/// A file's size and modification time, `None` when it is not there.
fn stamp(path: &Path) -> Option<(u64, SystemTime)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?))
}

/// The logged point nearest step `x` (points are sorted by step).
fn nearest(points: &[contrai_doctor::Point], x: f64) -> Option<contrai_doctor::Point> {
    let i = points.partition_point(|p| (p.step as f64) < x);
    let after = points.get(i);
    let before = i.checked_sub(1).and_then(|j| points.get(j));
    match (before, after) {
        (Some(b), Some(a)) => Some(if x - b.step as f64 <= a.step as f64 - x {
            *b
        } else {
            *a
        }),
        (b, a) => b.or(a).copied(),
    }
}

/// The highest step of any of a run's series.
fn last_step(run: &Run) -> u64 {
    run.series
        .values()
        .filter_map(|d| d.points.last())
        .map(|p| p.step)
        .max()
        .unwrap_or(0)
}

fn unit(run: &Run) -> &'static str {
    match run.hints.x_unit {
        XUnit::Step => "step",
        XUnit::Epoch => "epoch",
    }
}

/// A duration in words: `45 s`, `12 min`, `3 h 20 min`.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        _ => format!("{} h {} min", s / 3600, s / 60 % 60),
    }
}

/// Whether a Contrai run directory has its final evaluation (the run ended).
fn finished(path: &Path) -> bool {
    is_run_dir(path) && RunDir::new(path).eval().is_file()
}
