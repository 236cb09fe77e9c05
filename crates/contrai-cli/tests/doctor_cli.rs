//! Integration tests of `contrai doctor` (the binary).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_contrai"))
}

fn eval_dir() -> Option<PathBuf> {
    contrai_testkit::shared("eval/doctor/cases")
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn labels_of(run: &Value) -> Vec<String> {
    run["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["label"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn eval_cases_through_the_binary() {
    let Some(dir) = eval_dir() else { return };
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("list")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("case.json").is_file())
        .collect();
    cases.sort();
    let mut errors = Vec::new();
    for case in cases {
        let meta: Value =
            serde_json::from_str(&std::fs::read_to_string(case.join("case.json")).expect("read"))
                .expect("case.json");
        let id = meta["id"].as_str().unwrap_or("?").to_string();
        let out = bin()
            .args(["doctor", "--json"])
            .arg(&case)
            .output()
            .expect("run contrai");
        let code = out.status.code();
        let json: Value = match serde_json::from_slice(&out.stdout) {
            Ok(v) => v,
            Err(e) => {
                errors.push(format!(
                    "{id}: bad JSON ({e}), stderr {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
                continue;
            }
        };
        let runs = json["runs"].as_array().cloned().unwrap_or_default();
        for r in &runs {
            for key in ["name", "source", "verdict", "findings"] {
                assert!(r.get(key).is_some(), "{id}: missing `{key}`");
            }
        }
        let expectations: Vec<(String, Vec<String>, Vec<String>)> =
            match meta.get("runs").and_then(Value::as_object) {
                Some(per_run) => per_run
                    .iter()
                    .map(|(name, exp)| {
                        let mut mn = strings(exp, "must_not");
                        mn.extend(strings(&meta, "must_not"));
                        (name.clone(), strings(exp, "labels"), mn)
                    })
                    .collect(),
                None => vec![(
                    String::new(),
                    strings(&meta, "labels"),
                    strings(&meta, "must_not"),
                )],
            };
        for (name, want, must_not) in expectations {
            let found: Vec<String> = if name.is_empty() {
                runs.iter().flat_map(labels_of).collect()
            } else {
                runs.iter()
                    .filter(|r| r["name"] == name.as_str())
                    .flat_map(labels_of)
                    .collect()
            };
            println!("{id} {name}: {found:?} (exit {code:?})");
            for w in &want {
                if !found.contains(w) {
                    errors.push(format!("{id} {name}: missing {w} in {found:?}"));
                }
            }
            for m in &must_not {
                if found.contains(m) {
                    errors.push(format!("{id} {name}: must not report {m}: {found:?}"));
                }
            }
        }
        let healthy_only = strings(&meta, "labels") == ["healthy"] && meta.get("runs").is_none();
        let want_code = if healthy_only { 0 } else { 1 };
        if code != Some(want_code) {
            errors.push(format!("{id}: exit {code:?}, expected {want_code}"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

fn write_jsonl(path: &Path, rows: &[String]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open");
    for r in rows {
        writeln!(f, "{r}").expect("write");
    }
}

fn rows(from: u64, to: u64, nan_at: Option<u64>) -> Vec<String> {
    (from..to)
        .map(|i| {
            let loss = if Some(i) == nan_at {
                "NaN".to_string()
            } else {
                format!("{}", 0.3 + 2.0 * (-(i as f64) / 30.0).exp())
            };
            format!(
                "{{\"step\":{},\"phase\":\"main\",\"train_loss\":{loss},\"lr\":0.0003}}",
                i * 10
            )
        })
        .collect()
}

#[test]
fn text_report_and_exit_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("metrics.jsonl");
    write_jsonl(&p, &rows(0, 60, Some(50)));
    let out = bin().arg("doctor").arg(&p).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let first = text.lines().next().unwrap_or("");
    assert!(first.starts_with("verdict: action needed"), "{text}");
    assert!(text.contains("nonfinite from step 500"), "{text}");
    assert!(text.contains("train_loss"), "{text}");
    assert!(text.contains("bf16"), "{text}");

    let out = bin().args(["doctor", "--json"]).arg(&p).output().expect("run");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["runs"][0]["verdict"], "action needed");
    assert_eq!(v["runs"][0]["findings"][0]["label"], "nonfinite");
    assert_eq!(v["runs"][0]["findings"][0]["step"], 500);
}

#[test]
fn unreadable_input_exits_2_and_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("metrics.jsonl");
    std::fs::write(
        &p,
        "{\"step\":1,\"loss\":1}\nnot json at all\n{\"step\":2,\"loss\":1}\n",
    )
    .expect("write");
    let out = bin().arg("doctor").arg(&p).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metrics.jsonl:2"), "{err}");

    let out = bin()
        .args(["doctor", "/definitely/not/here.csv"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/definitely/not/here.csv"));

    let out = bin()
        .args(["doctor", "--format", "bogus"])
        .arg(&p)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn format_override_reads_an_odd_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("log.txt");
    write_jsonl(&p, &rows(0, 40, None));
    let out = bin()
        .args(["doctor", "--json", "--format", "jsonl"])
        .arg(&p)
        .output()
        .expect("run");
    assert!(
        out.status.code().is_some_and(|c| c < 2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn watch_follows_a_growing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("metrics.jsonl");
    write_jsonl(&p, &rows(0, 30, None));
    let child = bin()
        .args(["doctor", "--watch", "--idle-secs", "4"])
        .arg(&p)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(std::time::Duration::from_millis(1200));
    // A partial last line (a writer mid-flush) must be tolerated.
    write_jsonl(&p, &rows(30, 60, Some(45)));
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let live = text
        .lines()
        .filter(|l| l.contains("nonfinite from step 450"))
        .count();
    // Printed once live, and once more inside the closing report.
    assert!(live >= 1, "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with('[') && l.contains("nonfinite"))
            .count(),
        1,
        "{text}"
    );
}
