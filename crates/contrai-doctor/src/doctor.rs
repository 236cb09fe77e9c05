//! The incremental doctor: feed points as they arrive, collect findings. Offline diagnosis
//! replays a parsed run through the same object.

use serde::Serialize;

use crate::detect::{self, Ctx, Trigger};
use crate::finding::{Finding, Label};
use crate::series::{LogOrder, LossPart, Point, Run, RunHints, Series, Task};

/// Thresholds of the detectors. Defaults follow general practice, not any one log.
#[derive(Clone, Debug, PartialEq)]
pub struct DoctorConfig {
    /// Overfitting: steps without validation improvement (converted to evals by the cadence).
    pub patience_steps: f64,
    /// Overfitting: minimum number of evals without improvement (also the patience for epochs).
    pub patience_evals: usize,
    /// Overfitting: the training loss must have fallen by this fraction since the best eval.
    pub train_fall_min: f64,
    /// Plateau: the smoothed loss improved by less than this fraction over the recent window.
    pub plateau_rel: f64,
    /// Plateau: the recent window's share of the points seen.
    pub plateau_window: f64,
    /// Spikes: robust z-score (log space) above which a point is a spike.
    pub spike_z: f64,
    /// Spikes: minimum ratio to the recent median for a loss spike.
    pub spike_ratio: f64,
    /// Spikes: points of history the z-score is computed on.
    pub spike_window: usize,
    /// Gradient explosion: minimum ratio to the recent median gradient norm.
    pub grad_explode_ratio: f64,
    /// Gradient vanishing: ratio of the latest to the peak gradient norm below which it vanished.
    pub grad_vanish_ratio: f64,
    /// Oscillation: median step-to-step relative swing above which the loss oscillates.
    pub oscillation_amplitude: f64,
    /// Stuck at chance: max relative distance of the loss to ln K.
    pub chance_tolerance: f64,
    /// LR warmup longer than this share of the run is too long.
    pub warmup_max: f64,
    /// LR warmup shorter than this share of the run is too short.
    pub warmup_min: f64,
    /// LR final/peak ratio above which the LR did not decay.
    pub no_decay_ratio: f64,
    /// Resume: the LR after a segment boundary off by this factor from every LR it could go on
    /// from (the one logged at that step before, the last one) has not continued.
    pub resume_lr_ratio: f64,
    /// Resume: a loss level off by this factor from every level it could go on from...
    pub resume_loss_ratio: f64,
    /// ...and by this many robust noise units of the segment before has jumped.
    pub resume_loss_z: f64,
}

impl Default for DoctorConfig {
    fn default() -> Self {
        DoctorConfig {
            patience_steps: 300.0,
            patience_evals: 3,
            train_fall_min: 0.03,
            plateau_rel: 0.005,
            plateau_window: 0.4,
            spike_z: 6.0,
            spike_ratio: 1.5,
            spike_window: 20,
            grad_explode_ratio: 10.0,
            grad_vanish_ratio: 1e-3,
            oscillation_amplitude: 0.03,
            chance_tolerance: 0.03,
            warmup_max: 0.25,
            warmup_min: 0.005,
            no_decay_ratio: 0.9,
            resume_lr_ratio: 1.5,
            resume_loss_ratio: 1.25,
            resume_loss_z: 6.0,
        }
    }
}

/// Per-series buffers the detectors read.
#[derive(Clone, Debug, Default)]
pub struct RunState {
    /// Points per canonical series, indexed by [`Series::index`].
    pub series: [Vec<Point>; 6],
    /// Run-level hints.
    pub hints: RunHints,
    /// Natural logs of the latest finite values per series (NaN for a value <= 0), newest last,
    /// at most 64: the spike detectors' history, kept so a push costs O(window).
    pub recent_logs: [std::collections::VecDeque<f64>; 6],
    /// Per series, whether a value below zero has been logged: a signed objective (a policy
    /// surrogate, a negative log-likelihood), whose ratios measure nothing.
    pub signed: [bool; 6],
    /// Per series, the log's own order and segment starts, when a parsed log gave them (the
    /// resume rule's input; pushed points carry no order of their own).
    pub logs: [Option<LogOrder>; 6],
    /// The parts of a loss logged in parts, as the log last read gave them (judged at the end).
    pub parts: Vec<LossPart>,
}

impl RunState {
    /// Points of a series.
    pub fn points(&self, s: Series) -> &[Point] {
        &self.series[s.index()]
    }

    /// The log order of a series, when the log has more than one segment.
    pub fn log(&self, s: Series) -> Option<&LogOrder> {
        self.logs[s.index()].as_ref()
    }

    /// The largest step seen in any series.
    pub fn last_step(&self) -> u64 {
        self.series
            .iter()
            .filter_map(|v| v.last().map(|p| p.step))
            .max()
            .unwrap_or(0)
    }
}

/// The live doctor: push points, get findings (each label at most once).
#[derive(Clone, Debug)]
pub struct Doctor {
    cfg: DoctorConfig,
    state: RunState,
    findings: Vec<Finding>,
    resolved: Vec<Finding>,
    next_review: [usize; 6],
    finished: bool,
}

impl Doctor {
    /// A doctor with the given thresholds.
    pub fn new(cfg: DoctorConfig) -> Self {
        Doctor {
            cfg,
            state: RunState::default(),
            findings: Vec::new(),
            resolved: Vec::new(),
            next_review: [1; 6],
            finished: false,
        }
    }

    /// Sets run hints (x-axis unit, planned total steps, number of classes).
    pub fn set_hints(&mut self, hints: RunHints) {
        self.state.hints = hints;
    }

    /// Feeds one point; returns the findings it newly triggered.
    pub fn push(&mut self, series: Series, step: u64, value: f64) -> Vec<Finding> {
        let buf = &mut self.state.series[series.index()];
        buf.push(Point { step, value });
        let len = buf.len();
        let mut out = Vec::new();
        let ctx = Ctx {
            cfg: &self.cfg,
            st: &self.state,
        };
        let mut fresh = detect::on_point(&ctx, series);
        if value.is_finite() {
            let ring = &mut self.state.recent_logs[series.index()];
            if ring.len() == 64 {
                ring.pop_front();
            }
            ring.push_back(if value > 0.0 { value.ln() } else { f64::NAN });
            self.state.signed[series.index()] |= value < 0.0;
        }
        let ctx = Ctx {
            cfg: &self.cfg,
            st: &self.state,
        };
        if len >= self.next_review[series.index()] {
            // Trend detectors run on a geometric schedule: amortised O(n log n) for a log of n.
            self.next_review[series.index()] = (len + 1).max(len + len / 8);
            fresh.extend(detect::review(&ctx, Trigger::Review(series)));
        }
        for f in fresh {
            if self.record(f.clone()) {
                out.push(f);
            }
        }
        out
    }

    /// Ends the run: runs the end-of-run checks (schedule, healthy). Returns new findings.
    pub fn finish(&mut self) -> Vec<Finding> {
        if self.finished {
            return Vec::new();
        }
        self.finished = true;
        let ctx = Ctx {
            cfg: &self.cfg,
            st: &self.state,
        };
        let fresh = detect::review(&ctx, Trigger::Finish);
        // Trend findings raised live that the whole run no longer supports are resolved (a
        // transient plateau, a validation dip the run recovered from); point events stay.
        let confirmed: Vec<Label> = fresh.iter().map(|f| f.label).collect();
        // So is a spike the whole run shows to be the top of its loss's own tail of jumps.
        let (keep, resolved): (Vec<Finding>, Vec<Finding>) =
            std::mem::take(&mut self.findings).into_iter().partition(|f| {
                let trend = matches!(
                    f.label,
                    Label::Overfitting | Label::Plateau | Label::Oscillation | Label::StuckAtChance
                );
                (!trend || confirmed.contains(&f.label)) && !detect::spike::in_its_tail(&ctx, f)
            });
        self.findings = keep;
        self.resolved.extend(resolved);
        for f in &mut self.findings {
            detect::spike::settle(
                &Ctx {
                    cfg: &self.cfg,
                    st: &self.state,
                },
                f,
            );
        }
        let mut out = Vec::new();
        for f in fresh {
            let confidence = self.confidence(&f);
            if let Some(old) = self.findings.iter_mut().find(|g| g.label == f.label) {
                // Already reported live: keep its start step, refresh the numbers to the end —
                // unless the best evaluation it starts from came later (an onset before the
                // best checkpoint it names would be no onset).
                if f.evidence.get("best_step").is_some_and(|&b| b >= old.step as f64) {
                    old.step = f.step;
                }
                old.severity = old.severity.max(f.severity);
                old.evidence = f.evidence;
                old.recommendation = f.recommendation;
                old.confidence = confidence;
                continue;
            }
            if self.record(f.clone()) {
                out.push(f);
            }
        }
        if !self.findings.iter().any(Finding::actionable) {
            let ctx = Ctx {
                cfg: &self.cfg,
                st: &self.state,
            };
            let f = detect::healthy(&ctx);
            if self.record(f.clone()) {
                out.push(f);
            }
        }
        out
    }

    fn record(&mut self, mut f: Finding) -> bool {
        if self.findings.iter().any(|g| g.label == f.label) {
            return false;
        }
        f.confidence = self.confidence(&f);
        self.findings.push(f);
        true
    }

    fn confidence(&self, f: &Finding) -> crate::finding::Confidence {
        let ctx = Ctx {
            cfg: &self.cfg,
            st: &self.state,
        };
        detect::confidence::of(&ctx, f)
    }

    /// Feeds the points of `run` not fed yet (`seen` counts fed points per series), in step
    /// order, and takes its log order (segment starts); used to follow a log that grows.
    /// Returns the findings newly triggered.
    pub fn feed_new_points(&mut self, run: &Run, seen: &mut [usize; 6]) -> Vec<Finding> {
        let mut fresh: Vec<(Series, Point)> = Vec::new();
        self.state.parts.clone_from(&run.parts);
        for (s, d) in &run.series {
            self.state.logs[s.index()].clone_from(&d.log);
            let from = seen[s.index()].min(d.points.len());
            fresh.extend(d.points[from..].iter().map(|p| (*s, *p)));
            seen[s.index()] = d.points.len();
        }
        fresh.sort_by_key(|(s, p)| (p.step, *s));
        let mut out = Vec::new();
        for (s, p) in fresh {
            out.extend(self.push(s, p.step, p.value));
        }
        out
    }

    /// Every finding so far, in the order emitted.
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    /// Trend findings raised live that the finished run no longer supported.
    pub fn resolved(&self) -> &[Finding] {
        &self.resolved
    }

    /// The buffered series.
    pub fn state(&self) -> &RunState {
        &self.state
    }

    /// True when some finding warrants action.
    pub fn needs_action(&self) -> bool {
        self.findings.iter().any(Finding::actionable)
    }
}

impl Default for Doctor {
    fn default() -> Self {
        Doctor::new(DoctorConfig::default())
    }
}

/// The diagnosis of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Run name.
    pub name: String,
    /// Where it was read from.
    pub source: String,
    /// `healthy` or `action needed`.
    pub verdict: String,
    /// What the run trains, as its files or metric names say.
    pub task: Task,
    /// Its class count when known.
    pub classes: Option<u32>,
    /// Where the task was read ("config.json", "hparams.yaml", "metric names").
    pub task_source: Option<String>,
    /// The training setup the run's own files state (empty: none said anything).
    #[serde(skip_serializing_if = "crate::stated_setup::Setup::is_empty")]
    pub setup: crate::stated_setup::Setup,
    /// Findings, most severe first.
    pub findings: Vec<Finding>,
    /// What of the log could not be read (the findings rest on the rest, a notch less sure).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partial: Vec<crate::series::Partial>,
}

impl Report {
    /// "cosine, warmup 10 %, peak LR 1.00e-4, batch 8 x 4 accumulated = 32 (training_args.yaml)",
    /// or `None` when the run's files said nothing.
    pub fn setup_line(&self) -> Option<String> {
        let s = &self.setup;
        let mut parts: Vec<String> = Vec::new();
        if let Some(k) = s.schedule {
            parts.push(serde_json::to_value(k).ok()?.as_str()?.to_string());
        }
        match (s.warmup_ratio, s.warmup_steps, s.warmup_epochs) {
            (Some(r), _, _) => parts.push(format!("warmup {:.0} %", 100.0 * r)),
            (None, Some(n), _) => parts.push(format!("warmup {n} steps")),
            (None, None, Some(e)) => parts.push(format!("warmup {e} epochs")),
            _ => {}
        }
        if let Some(e) = s.epochs {
            parts.push(format!("{e} epochs"));
        }
        if let Some(lr) = s.peak_lr {
            parts.push(format!("peak LR {}", crate::detect::num(lr)));
        }
        parts.extend(s.batch_line());
        let mut files: Vec<&str> = s.settings.iter().map(|x| x.file.as_str()).collect();
        files.dedup();
        (!parts.is_empty()).then(|| format!("{} ({})", parts.join(", "), files.join(", ")))
    }

    /// "classification, 10 classes (hparams.yaml)", "language model (config.json)", "unknown".
    pub fn task_line(&self) -> String {
        let what = match (self.task, self.classes) {
            (Task::Unknown, _) => return "unknown (no config, hparams or accuracy beside the log)".into(),
            (Task::Classification, Some(k)) => format!("classification, {k} classes"),
            (Task::Classification, None) => "classification".into(),
            (Task::LanguageModel, _) => "language model".into(),
        };
        match &self.task_source {
            Some(from) => format!("{what} ({from})"),
            None => what,
        }
    }
}

impl Report {
    /// True when the run needs action.
    pub fn needs_action(&self) -> bool {
        self.findings.iter().any(Finding::actionable)
    }
}

/// Replays a parsed run through a fresh [`Doctor`] and returns its report.
pub fn diagnose(run: &Run, cfg: &DoctorConfig) -> Report {
    let mut doctor = Doctor::new(cfg.clone());
    doctor.set_hints(run.hints.clone());
    let mut seen = [0usize; 6];
    doctor.feed_new_points(run, &mut seen);
    doctor.finish();
    report_of(run, &doctor)
}

/// The report of a run from a doctor's current findings.
pub fn report_of(run: &Run, doctor: &Doctor) -> Report {
    let mut findings = doctor.findings().to_vec();
    findings.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.step.cmp(&b.step)));
    // A log read in part: every finding a notch less sure (what was not read may say otherwise).
    if !run.hints.partial.is_empty() {
        for f in &mut findings {
            f.confidence = f.confidence.lowered();
        }
    }
    let verdict = if doctor.needs_action() {
        "action needed"
    } else {
        "healthy"
    };
    Report {
        name: run.name.clone(),
        source: run.source.clone(),
        verdict: verdict.to_string(),
        task: run.hints.task,
        classes: run.hints.num_classes,
        task_source: run.hints.task_source.clone(),
        setup: run.hints.setup.clone(),
        findings,
        partial: run.hints.partial.clone(),
    }
}
