//! Every case of `../shared/eval/doctor/`: all labels reported, none of `must_not`
//! (per run for multi-run files). Skips with a message when the folder is absent (fails when
//! `CONTRAI_REQUIRE_SHARED` is set). The same scoring, per label, on a labelled set of real runs
//! kept outside the repository (`CONTRAI_DOCTOR_CORPUS`, `eval/doctor-real/`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use contrai_doctor::{Confidence, DoctorConfig, Report, diagnose, read_path};
use serde_json::Value;

fn eval_dir() -> Option<PathBuf> {
    contrai_testkit::shared("eval/doctor/cases")
}

/// Each finding's label and how sure it is.
fn labels(report: &Report) -> Vec<(&'static str, Confidence)> {
    report
        .findings
        .iter()
        .map(|f| (f.label.as_str(), f.confidence))
        .collect()
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Required findings reported, required ones missed, forbidden ones reported.
#[derive(Default, Clone, Copy)]
struct Score {
    hits: usize,
    misses: usize,
    forbidden: usize,
}

impl Score {
    fn precision(self) -> f64 {
        self.hits as f64 / (self.hits + self.forbidden).max(1) as f64
    }
    fn recall(self) -> f64 {
        self.hits as f64 / (self.hits + self.misses).max(1) as f64
    }
}

/// Which part of the labelled set a case belongs to: rules are tuned on one, judged on the other.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Part {
    Tuning,
    Test,
}

impl Part {
    /// The part of case `id`: test when the first byte of the SHA-256 of its id is below 102
    /// (about 40 %), tuning otherwise. Fixed forever, so no case moves after it is seen.
    fn of(id: &str) -> Part {
        use sha2::Digest;
        if sha2::Sha256::digest(id.as_bytes())[0] < 102 {
            Part::Test
        } else {
            Part::Tuning
        }
    }
}

/// Findings of one confidence: right (a required label), unjudged (neither list), wrong (a
/// forbidden label).
#[derive(Default, Clone, Copy)]
struct Calibration {
    right: usize,
    unjudged: usize,
    wrong: usize,
}

/// Scores by label, by format and in all, and how often each confidence was right.
#[derive(Default)]
struct Scores {
    all: Score,
    by_confidence: BTreeMap<String, Calibration>,
    runs: usize,
    by_label: BTreeMap<String, Score>,
    by_format: BTreeMap<String, Score>,
}

impl Scores {
    fn check(
        &mut self,
        (id, name, format): (&str, &str, &str),
        findings: &[(&str, Confidence)],
        want: &[String],
        must_not: &[String],
    ) -> Vec<String> {
        let mut errs = Vec::new();
        self.runs += 1;
        for (label, confidence) in findings {
            let c = self.by_confidence.entry(format!("{confidence:?}")).or_default();
            if want.iter().any(|w| w == label) {
                c.right += 1;
            } else if must_not.iter().any(|m| m == label) {
                c.wrong += 1;
            } else {
                c.unjudged += 1;
            }
        }
        let found: Vec<&str> = findings.iter().map(|f| f.0).collect();
        for w in want {
            let hit = found.contains(&w.as_str());
            for s in [
                self.by_label.entry(w.clone()).or_default(),
                self.by_format.entry(format.to_string()).or_default(),
                &mut self.all,
            ] {
                if hit { s.hits += 1 } else { s.misses += 1 }
            }
            if !hit {
                errs.push(format!("{id}/{name}: missing `{w}` (found {found:?})"));
            }
        }
        for m in must_not.iter().filter(|m| found.contains(&m.as_str())) {
            for s in [
                self.by_label.entry(m.clone()).or_default(),
                self.by_format.entry(format.to_string()).or_default(),
                &mut self.all,
            ] {
                s.forbidden += 1;
            }
            errs.push(format!("{id}/{name}: must not report `{m}` (found {found:?})"));
        }
        errs
    }

    fn print(&self, what: &str) {
        for (by, table) in [("label", &self.by_label), ("format", &self.by_format)] {
            println!("| {by} | required reported | missed | forbidden reported | precision | recall |");
            println!("|---|---:|---:|---:|---:|---:|");
            for (key, s) in table {
                println!(
                    "| {key} | {} | {} | {} | {:.2} | {:.2} |",
                    s.hits,
                    s.misses,
                    s.forbidden,
                    s.precision(),
                    s.recall()
                );
            }
        }
        println!("| confidence | right | unjudged | wrong | right of judged |");
        println!("|---|---:|---:|---:|---:|");
        for (c, n) in &self.by_confidence {
            let judged = (n.right + n.wrong).max(1) as f64;
            println!(
                "| {c} | {} | {} | {} | {:.3} |",
                n.right,
                n.unjudged,
                n.wrong,
                n.right as f64 / judged
            );
        }
        let a = self.all;
        println!(
            "{what}: {} runs, {} required findings reported, {} missed, {} forbidden reported: precision {:.3}, recall {:.3}",
            self.runs,
            a.hits,
            a.misses,
            a.forbidden,
            a.precision(),
            a.recall()
        );
    }
}

/// The repository's manifests of the labelled real runs, relative to this crate: the labels
/// there are the ones that count, wherever the logs lie.
const MANIFESTS: &str = "../../eval/doctor-real/cases";

/// A case's `case.json`: the repository's manifest of that id when it has one, else the one
/// beside its logs.
fn manifest(case: &Path) -> Value {
    let own = case.join("case.json");
    let ours = case
        .file_name()
        .map(|id| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join(MANIFESTS)
                .join(id)
                .join("case.json")
        })
        .filter(|p| p.is_file());
    let path = ours.unwrap_or(own);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every case under `dir` read and diagnosed, scored against its `case.json` (by part when
/// `split`, all as one otherwise); the failures.
fn score_cases(dir: &Path, split: bool) -> (BTreeMap<Option<Part>, Scores>, Vec<String>) {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list cases")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("case.json").is_file())
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no cases under {}", dir.display());
    let cfg = DoctorConfig::default();
    let mut scores: BTreeMap<Option<Part>, Scores> = BTreeMap::new();
    let mut errors = Vec::new();
    for case in &cases {
        let meta = manifest(case);
        let id = meta["id"].as_str().unwrap_or("?").to_string();
        let format = meta["format"].as_str().unwrap_or("?").to_string();
        let part = split.then(|| Part::of(&id));
        let scores = scores.entry(part).or_default();
        let runs = match read_path(case, None) {
            Ok(r) => r,
            Err(e) => {
                // Worded without the folder, which differs from machine to machine (the
                // known-misses list names the failure, not where the logs lie).
                let why = e.to_string().replace(&case.display().to_string(), "<case>");
                errors.push(format!("{id}: unreadable: {why}"));
                continue;
            }
        };
        let reports: Vec<Report> = runs.iter().map(|r| diagnose(r, &cfg)).collect();
        if let Some(per_run) = meta.get("runs").and_then(Value::as_object) {
            for (name, exp) in per_run {
                let Some(rep) = reports.iter().find(|r| &r.name == name) else {
                    errors.push(format!("{id}: run `{name}` not found"));
                    continue;
                };
                let found = labels(rep);
                println!("{id} / {name}: {found:?}");
                let mut must_not = strings(exp, "must_not");
                must_not.extend(strings(&meta, "must_not"));
                let want = strings(exp, "labels");
                errors.extend(scores.check((&id, name, &format), &found, &want, &must_not));
            }
        } else {
            let mut found = Vec::new();
            for rep in &reports {
                found.extend(labels(rep));
            }
            println!("{id} [{part:?}]: {found:?}");
            for rep in &reports {
                for f in &rep.findings {
                    println!("    {} @{} {:?}", f.label, f.step, f.evidence);
                }
            }
            let (want, must_not) = (strings(&meta, "labels"), strings(&meta, "must_not"));
            errors.extend(scores.check((&id, "-", &format), &found, &want, &must_not));
        }
    }
    (scores, errors)
}

#[test]
fn every_eval_case_passes() {
    let Some(dir) = eval_dir() else { return };
    let (scores, errors) = score_cases(&dir, false);
    for s in scores.values() {
        s.print("visible cases");
    }
    assert!(errors.is_empty(), "eval failures:\n{}", errors.join("\n"));
}

/// Where the labelled real runs' logs sit once the steering repository holds them (developers
/// commit no file fetched from another repository; `eval/doctor-real/README.md`).
const CORPUS_IN_SHARED: &str = "../../../shared/eval/doctor-real/cases";

/// The labelled set of real published runs (issues 30 and 49), when `CONTRAI_DOCTOR_CORPUS` names
/// its `cases/` folder or `../shared` holds it: per part (tuning, test), the tables by label and
/// by format, and (from `../shared`, or with `CONTRAI_DOCTOR_CORPUS_STRICT`) no failure beyond
/// the known ones (`eval/doctor-real/known-misses.txt`), none of those fixed and still listed.
/// Cases whose logs are absent are not there to score. Skipped while neither holds the logs (they are not in this repository).
#[test]
fn the_labelled_real_runs_score() {
    let in_shared = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(CORPUS_IN_SHARED);
    let (dir, strict) = match std::env::var_os("CONTRAI_DOCTOR_CORPUS") {
        Some(d) => (
            PathBuf::from(d),
            std::env::var_os("CONTRAI_DOCTOR_CORPUS_STRICT").is_some(),
        ),
        None if in_shared.is_dir() => (in_shared, true),
        None => return,
    };
    let (scores, errors) = score_cases(&dir, true);
    for e in &errors {
        println!("FAIL {e}");
    }
    for (part, s) in &scores {
        s.print(&format!(
            "labelled real runs, {} part",
            part.map_or("whole".into(), |p| format!("{p:?}").to_lowercase())
        ));
    }
    if strict {
        let (new, fixed) = against_known_misses(&dir, &errors);
        assert!(
            new.is_empty() && fixed.is_empty(),
            "failures not in {KNOWN_MISSES} (regressions):\n{}\nlisted there but no longer failing (remove \
             their lines):\n{}",
            new.join("\n"),
            fixed.join("\n")
        );
    }
}

/// The doctor's known failures on the labelled runs, relative to this crate.
const KNOWN_MISSES: &str = "../../eval/doctor-real/known-misses.txt";

/// The failures `errors` holds that `KNOWN_MISSES` does not list, and the listed ones of cases
/// under `dir` that no longer fail: a ratchet that holds what the doctor gets right, whichever
/// cases' logs are present.
fn against_known_misses(dir: &Path, errors: &[String]) -> (Vec<String>, Vec<String>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(KNOWN_MISSES);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let known: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .collect();
    let key = |e: &str| e.split(" (found").next().unwrap_or(e).to_string();
    let failing: Vec<String> = errors.iter().map(|e| key(e)).collect();
    let new = failing
        .iter()
        .filter(|f| !known.contains(&f.as_str()))
        .cloned()
        .collect();
    let present = |k: &str| dir.join(k.split('/').next().unwrap_or("")).is_dir();
    let fixed = (known.iter().copied())
        .filter(|k| present(k) && !failing.iter().any(|f| f == k))
        .map(str::to_string)
        .collect();
    (new, fixed)
}
