//! Logs followed as they grow, each run with a live doctor that has seen every point so far: what
//! `contrai doctor --watch` prints and `contrai watch` shows.

use std::path::{Path, PathBuf};

use crate::read::{Format, Tail};
use crate::{Doctor, DoctorConfig, Finding, Run};

/// A run of a followed log, with its live doctor.
pub struct LiveRun {
    /// Which followed path it is under (its index).
    pub path: usize,
    /// The run as read so far.
    pub run: Run,
    /// The doctor that has seen its points.
    pub doctor: Doctor,
    /// Points fed to the doctor, per series.
    seen: [usize; 6],
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

    /// Reads what was written since the last poll and feeds the new points to the runs' doctors.
    /// Returns whether anything changed and the findings newly raised, each with its run's name
    /// (not its place in [`Live::runs`], which a run whose log went leaves).
    pub fn poll(&mut self) -> (bool, Vec<(String, Finding)>) {
        let mut changed = false;
        let mut fresh = Vec::new();
        for i in 0..self.tails.len() {
            let tail = &mut self.tails[i];
            let runs = match tail.poll().and_then(|c| c.then(|| tail.runs()).transpose()) {
                Ok(None) => continue,
                Ok(Some(runs)) => runs,
                Err(e) => {
                    changed |= self.waiting[i].as_deref() != Some(&e.to_string());
                    self.waiting[i] = Some(e.to_string());
                    continue;
                }
            };
            changed = true;
            self.waiting[i] = None;
            // A run whose log went (an older checkpoint's state, deleted) is no longer shown.
            self.runs.retain(|r| {
                r.path != i
                    || runs
                        .iter()
                        .any(|n| n.name == r.run.name || n.source == r.run.source)
            });
            let logs: Vec<String> = runs.iter().map(|r| r.source.clone()).collect();
            for mut run in runs {
                if self.clip_norm.is_some() {
                    run.hints.clip_norm = self.clip_norm;
                }
                fresh.extend(self.update(i, run, &logs));
            }
        }
        (changed, fresh)
    }

    /// Feeds a run read again to its doctor (a new one for a run not seen before). A run is
    /// known by its log and name, or by its name alone once its log moved (a Trainer's newest
    /// checkpoint holds its state, and no run read now comes from its old log).
    fn update(&mut self, path: usize, run: Run, logs: &[String]) -> Vec<(String, Finding)> {
        let named = |r: &LiveRun| r.path == path && r.run.name == run.name;
        let known = (self
            .runs
            .iter()
            .position(|r| named(r) && r.run.source == run.source))
        .or_else(|| {
            self.runs
                .iter()
                .position(|r| named(r) && !logs.contains(&r.run.source))
        });
        let k = known.unwrap_or_else(|| {
            let mut doctor = Doctor::new(self.cfg.clone());
            doctor.set_hints(run.hints.clone());
            self.runs.push(LiveRun {
                path,
                run: run.clone(),
                doctor,
                seen: [0; 6],
            });
            self.runs.len() - 1
        });
        let r = &mut self.runs[k];
        let found = r.doctor.feed_new_points(&run, &mut r.seen);
        let named = found.into_iter().map(|f| (run.name.clone(), f)).collect();
        r.run = run;
        named
    }

    /// The end of the logs: the findings only a whole run shows.
    pub fn finish(&mut self) -> Vec<(String, Finding)> {
        let mut out = Vec::new();
        for r in &mut self.runs {
            out.extend(r.doctor.finish().into_iter().map(|f| (r.run.name.clone(), f)));
        }
        out
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
