//! Logs followed as they grow, each run with what the doctor says of it so far: what
//! `contrai doctor --follow` prints and `contrai watch` shows.
//!
//! One doctor: a followed run's report is `contrai doctor`'s on the log as it stands
//! ([`diagnose`] of the run read so far), so a finding shown live at step t is what the doctor
//! after the fact says of the log cut at t, and the last report is `contrai doctor`'s. A report
//! that took long spaces the next one (at most a tenth of a core on a log that keeps growing).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::doctor::{Report, diagnose, report_of};
use crate::read::{Format, Tail};
use crate::{DoctorConfig, Finding, Run};

/// Time between two reports of a run, in multiples of the last one's cost.
const SPACING: u32 = 9;

/// A run of a followed log, with the doctor's report of it.
pub struct LiveRun {
    /// Which followed path it is under (its index).
    pub path: usize,
    /// The run as read so far.
    pub run: Run,
    /// The doctor's report of the run as it stood when last diagnosed.
    pub report: Report,
    /// Points read since that report.
    stale: bool,
    /// When the next report may be made.
    next: Instant,
}

/// Paths followed with a live doctor per run found under them.
pub struct Live {
    tails: Vec<Tail>,
    cfg: DoctorConfig,
    clip_norm: Option<f64>,
    runs: Vec<LiveRun>,
    /// Per path, why it has no run yet (not there yet, no metrics yet, a line that does not
    /// parse yet).
    waiting: Vec<Option<String>>,
}

impl Live {
    /// Follows `paths`, each read as `format` (detected when `None`).
    pub fn new(paths: &[PathBuf], format: Option<Format>, cfg: DoctorConfig) -> Live {
        Live {
            tails: paths.iter().map(|p| Tail::new(p, format)).collect(),
            cfg,
            clip_norm: None,
            runs: Vec::new(),
            waiting: vec![None; paths.len()],
        }
    }

    /// Tells every run that training clips the gradient norm at `c` (a command-line hint).
    pub fn clip_norm(mut self, c: Option<f64>) -> Live {
        self.clip_norm = c.filter(|c| c.is_finite() && *c > 0.0);
        self
    }

    /// Reads what was written since the last poll and diagnoses the runs that grew (a run whose
    /// last report was costly waits its turn). Returns whether anything changed and the findings
    /// newly raised, each with its run's name (not its place in [`Live::runs`], which a run whose
    /// log went leaves).
    pub fn poll(&mut self) -> (bool, Vec<(String, Finding)>) {
        let mut changed = false;
        for i in 0..self.tails.len() {
            changed |= self.read(i, Tail::poll);
        }
        (changed, self.diagnose(false))
    }

    /// Reads path `i` with `how` ([`Tail::poll`], [`Tail::end`]) and takes the runs it gave;
    /// true when anything changed (a new reason to wait included).
    fn read(&mut self, i: usize, how: fn(&mut Tail) -> Result<bool, crate::read::ReadError>) -> bool {
        let tail = &mut self.tails[i];
        let runs = match how(tail).and_then(|c| c.then(|| tail.runs()).transpose()) {
            Ok(None) => return false,
            Ok(Some(runs)) => runs,
            Err(e) => {
                let changed = self.waiting[i].as_deref() != Some(&e.to_string());
                self.waiting[i] = Some(e.to_string());
                return changed;
            }
        };
        self.waiting[i] = None;
        // A run whose log went (an older checkpoint's state, deleted) is no longer shown.
        self.runs.retain(|r| {
            r.path != i
                || runs
                    .iter()
                    .any(|n| n.name == r.run.name || n.source == r.run.source)
        });
        let logs: Vec<String> = runs.iter().map(|r| r.source.clone()).collect();
        let names: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
        for mut run in runs {
            if self.clip_norm.is_some() {
                run.hints.clip_norm = self.clip_norm;
            }
            self.update(i, run, (&logs, &names));
        }
        true
    }

    /// Takes a run read again (a new one for a run not seen before). A run is known by its log
    /// and name; by its name alone once its log moved (a Trainer's newest checkpoint holds its
    /// state, and no run read now comes from its old log); by its log alone once its name
    /// changed (a name file read while it was being written, then whole).
    fn update(&mut self, path: usize, run: Run, (logs, names): (&[String], &[String])) {
        let named = |r: &LiveRun| r.path == path && r.run.name == run.name;
        let known = (self
            .runs
            .iter()
            .position(|r| named(r) && r.run.source == run.source))
        .or_else(|| {
            self.runs
                .iter()
                .position(|r| named(r) && !logs.contains(&r.run.source))
        })
        .or_else(|| {
            self.runs
                .iter()
                .position(|r| r.path == path && r.run.source == run.source && !names.contains(&r.run.name))
        });
        match known {
            Some(k) => {
                self.runs[k].run = run;
                self.runs[k].stale = true;
            }
            None => self.runs.push(LiveRun {
                path,
                // No finding yet: the first diagnosis comes in this very poll.
                report: report_of(&run, &crate::Doctor::default()),
                run,
                stale: true,
                next: Instant::now(),
            }),
        }
    }

    /// Diagnoses the runs read since their last report — all of them with `now`, else those
    /// whose turn has come; the findings their reports hold that the ones before did not.
    fn diagnose(&mut self, now: bool) -> Vec<(String, Finding)> {
        let mut fresh = Vec::new();
        for r in self
            .runs
            .iter_mut()
            .filter(|r| r.stale && (now || Instant::now() >= r.next))
        {
            let started = Instant::now();
            let report = diagnose(&r.run, &self.cfg);
            r.next = Instant::now() + started.elapsed().max(Duration::from_millis(1)) * SPACING;
            r.stale = false;
            let had = |f: &Finding| r.report.findings.iter().any(|g| g.label == f.label);
            fresh.extend(
                report
                    .findings
                    .iter()
                    .filter(|f| !had(f))
                    .map(|f| (r.run.name.clone(), f.clone())),
            );
            r.report = report;
        }
        fresh
    }

    /// The end of the logs: what is left unread at their ends read as the doctor after the fact
    /// reads it (a last line without its newline, a record cut short: a partial read), and every
    /// run's report brought up to its last point; the findings that adds.
    pub fn finish(&mut self) -> Vec<(String, Finding)> {
        for i in 0..self.tails.len() {
            self.read(i, Tail::end);
        }
        self.diagnose(true)
    }

    /// Every run's report brought up to what was read so far, the logs still growing (a poll
    /// spaces costly reports); the findings that adds.
    pub fn report_all(&mut self) -> Vec<(String, Finding)> {
        self.diagnose(true)
    }

    /// The runs found so far, in the order they were found.
    pub fn runs(&self) -> &[LiveRun] {
        &self.runs
    }

    /// The paths followed.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.tails.iter().map(Tail::path)
    }

    /// Each path that has no run yet, with what it is waiting for.
    pub fn waiting(&self) -> impl Iterator<Item = (&Path, &str)> {
        self.paths()
            .zip(&self.waiting)
            .filter_map(|(p, w)| Some((p, w.as_deref()?)))
    }

    /// Bytes read from the logs so far.
    pub fn bytes_read(&self) -> u64 {
        self.tails.iter().map(Tail::bytes_read).sum()
    }
}
