//! One doctor: every labelled log of `../shared/eval/doctor/` and `../shared/eval/doctor-real/`,
//! written again a quarter at a time and followed live, ends with the findings `contrai doctor`
//! gives the whole log — the same labels, steps, recommendations and evidence.

use std::path::{Path, PathBuf};

use contrai_doctor::{DoctorConfig, Live, Report, diagnose, read_path};

/// The case folders of both labelled sets that `../shared` holds.
fn cases() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for set in ["eval/doctor/cases", "eval/doctor-real/cases"] {
        let Some(dir) = contrai_testkit::shared(set) else {
            continue;
        };
        let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("case.json").is_file())
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// Every file under `dir`, relative to it.
fn files(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir.join(rel)).unwrap().flatten() {
        let r = rel.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            files(dir, &r, out);
        } else {
            out.push(r);
        }
    }
}

/// Each run's findings as JSON, by run name.
fn findings(reports: &[Report]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = reports
        .iter()
        .map(|r| (r.name.clone(), serde_json::to_string(&r.findings).unwrap()))
        .collect();
    v.sort();
    v
}

#[test]
fn a_log_followed_as_it_grows_ends_with_the_findings_of_the_whole_log() {
    let cases = cases();
    if cases.is_empty() {
        return;
    }
    let cfg = DoctorConfig::default();
    let mut checked = 0;
    for case in &cases {
        let Ok(runs) = read_path(case, None) else { continue };
        let whole: Vec<Report> = runs.iter().map(|r| diagnose(r, &cfg)).collect();
        // The same files, written again: each grows by a quarter between two polls.
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join(case.file_name().unwrap());
        let mut rel = Vec::new();
        files(case, Path::new(""), &mut rel);
        let mut live = Live::new(std::slice::from_ref(&copy), None, cfg.clone());
        for quarter in 1..=4 {
            for r in &rel {
                let bytes = std::fs::read(case.join(r)).unwrap();
                let to = copy.join(r);
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::write(&to, &bytes[..bytes.len() * quarter / 4]).unwrap();
            }
            live.poll();
        }
        live.finish();
        let followed: Vec<Report> = live.runs().iter().map(|r| r.report.clone()).collect();
        assert_eq!(
            findings(&followed),
            findings(&whole),
            "{}: followed live, then after the fact",
            case.display()
        );
        checked += 1;
    }
    eprintln!("{checked} labelled logs: the same findings live and after the fact");
    assert!(checked >= 60, "{checked} cases checked");
}
