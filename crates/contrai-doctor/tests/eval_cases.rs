//! Every case of `../shared/eval/doctor/`: all labels reported, none of `must_not`
//! (per run for multi-run files). Skips with a message when the folder is absent (fails when
//! `CONTRAI_REQUIRE_SHARED` is set).

use std::path::PathBuf;

use contrai_doctor::{DoctorConfig, Label, Report, diagnose, read_path};
use serde_json::Value;

fn eval_dir() -> Option<PathBuf> {
    contrai_testkit::shared("eval/doctor/cases")
}

fn labels(report: &Report) -> Vec<&'static str> {
    report.findings.iter().map(|f| f.label.as_str()).collect()
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Required findings reported, required ones missed, forbidden ones reported.
#[derive(Default)]
struct Score {
    hits: usize,
    misses: usize,
    forbidden: usize,
}

fn check(
    score: &mut Score,
    (id, name): (&str, &str),
    found: &[&str],
    want: &[String],
    must_not: &[String],
) -> Vec<String> {
    let mut errs = Vec::new();
    for w in want {
        if found.contains(&w.as_str()) {
            score.hits += 1;
        } else {
            score.misses += 1;
            errs.push(format!("{id}/{name}: missing `{w}` (found {found:?})"));
        }
    }
    for m in must_not {
        if found.contains(&m.as_str()) {
            score.forbidden += 1;
            errs.push(format!("{id}/{name}: must not report `{m}` (found {found:?})"));
        }
    }
    errs
}

#[test]
fn every_eval_case_passes() {
    let Some(dir) = eval_dir() else { return };
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("list cases")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("case.json").is_file())
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no cases under {}", dir.display());
    let cfg = DoctorConfig::default();
    let mut errors = Vec::new();
    let mut score = Score::default();
    for case in &cases {
        let meta: Value =
            serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).expect("read case.json"))
                .expect("parse case.json");
        let id = meta["id"].as_str().unwrap_or("?").to_string();
        let runs = match read_path(case, None) {
            Ok(r) => r,
            Err(e) => {
                errors.push(format!("{id}: unreadable: {e}"));
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
                errors.extend(check(
                    &mut score,
                    (&id, name),
                    &found,
                    &strings(exp, "labels"),
                    &must_not,
                ));
            }
        } else {
            let mut found: Vec<&str> = Vec::new();
            for rep in &reports {
                found.extend(labels(rep));
            }
            println!("{id}: {found:?}");
            for rep in &reports {
                for f in &rep.findings {
                    println!("    {} @{} {:?}", f.label, f.step, f.evidence);
                }
            }
            errors.extend(check(
                &mut score,
                (&id, "-"),
                &found,
                &strings(&meta, "labels"),
                &strings(&meta, "must_not"),
            ));
        }
    }
    let _ = Label::Healthy;
    let Score {
        hits,
        misses,
        forbidden,
    } = score;
    println!(
        "visible cases: {hits} required findings reported, {misses} missed, {forbidden} forbidden reported: precision {:.2}, recall {:.2}",
        hits as f64 / (hits + forbidden).max(1) as f64,
        hits as f64 / (hits + misses).max(1) as f64
    );
    assert!(errors.is_empty(), "eval failures:\n{}", errors.join("\n"));
}
