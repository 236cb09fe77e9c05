//! Integration tests of `contrai doctor` (the binary).

use crate::util;

use std::io::Write;
use std::path::Path;

use serde_json::Value;
use util::{TempDir, contrai, doctor_eval_cases, read_json};

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
    let Some(cases) = doctor_eval_cases() else {
        return;
    };
    let mut errors = Vec::new();
    for case in cases {
        let meta = read_json(case.join("case.json"));
        let id = meta["id"].as_str().unwrap_or("?").to_string();
        let out = contrai(["doctor", "--json"]).arg(&case).output();
        let code = out.code();
        let json = match out.try_json() {
            Ok(v) => v,
            Err(e) => {
                errors.push(format!("{id}: bad JSON ({e})\n{out}"));
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
    let dir = TempDir::new();
    let p = dir.join("metrics.jsonl");
    write_jsonl(&p, &rows(0, 60, Some(50)));
    let out = contrai(["doctor"]).arg(&p).output();
    out.assert_code(1);
    let first = out.stdout.lines().next().unwrap_or("");
    assert!(first.starts_with("verdict: action needed"), "{out}");
    out.assert_stdout_contains(&["nonfinite from step 500 (high confidence)", "train_loss", "bf16"]);

    let v = contrai(["doctor", "--json"]).arg(&p).output().json();
    assert_eq!(v["runs"][0]["verdict"], "action needed");
    assert_eq!(v["runs"][0]["findings"][0]["label"], "nonfinite");
    assert_eq!(v["runs"][0]["findings"][0]["step"], 500);
    assert_eq!(v["runs"][0]["findings"][0]["confidence"], "high");
}

#[test]
fn the_setup_a_runs_files_state_is_shown_and_a_finding_quotes_it() {
    let dir = TempDir::new();
    let lines: Vec<String> = (1..=300)
        .map(|s| {
            format!(
                "{{\"current_steps\": {s}, \"total_steps\": 300, \"loss\": {}}}",
                0.5 + 1.0 / s as f64
            )
        })
        .collect();
    write_jsonl(&dir.join("trainer_log.jsonl"), &lines);
    let args = "stage: sft\nlr_scheduler_type: constant\nper_device_train_batch_size: 4\n";
    std::fs::write(dir.join("training_args.yaml"), args).unwrap();
    let out = contrai(["doctor"]).arg(dir.path()).output();
    out.assert_stdout_contains(&[
        "setup: constant, batch 4 (training_args.yaml)",
        "lr_no_decay from step 1",
        "lr_scheduler_type: constant (training_args.yaml)",
    ]);
    let v = contrai(["doctor", "--json"]).arg(dir.path()).output().json();
    assert_eq!(v["runs"][0]["setup"]["schedule"], "constant");
    assert_eq!(v["runs"][0]["setup"]["batch_size"], 4);
    let f = &v["runs"][0]["findings"][0];
    assert_eq!(f["label"], "lr_no_decay");
    assert_eq!(f["detail"]["setting"]["file"], "training_args.yaml", "{f}");
}

#[test]
fn unreadable_input_exits_2_and_names_the_file() {
    let dir = TempDir::new();
    let p = dir.write(
        "metrics.jsonl",
        "{\"step\":1,\"loss\":1}\nnot json at all\n{\"step\":2,\"loss\":1}\n",
    );
    contrai(["doctor"])
        .arg(&p)
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["metrics.jsonl:2"]);

    contrai(["doctor", "/definitely/not/here.csv"])
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["/definitely/not/here.csv"]);

    contrai(["doctor", "--format", "bogus"])
        .arg(&p)
        .output()
        .assert_code(2);
}

#[test]
fn format_override_reads_an_odd_name() {
    let dir = TempDir::new();
    let p = dir.join("log.txt");
    write_jsonl(&p, &rows(0, 40, None));
    let out = contrai(["doctor", "--json", "--format", "jsonl"])
        .arg(&p)
        .output();
    assert!(out.code().is_some_and(|c| c < 2), "{out}");
}

#[test]
fn watch_follows_a_growing_file() {
    let dir = TempDir::new();
    let p = dir.join("metrics.jsonl");
    write_jsonl(&p, &rows(0, 30, None));
    let child = contrai(["doctor", "--follow", "--idle-secs", "4"])
        .arg(&p)
        .spawn();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    // A partial last line (a writer mid-flush) must be tolerated.
    write_jsonl(&p, &rows(30, 60, Some(45)));
    let out = child.wait();
    out.assert_code(1);
    let text = &out.stdout;
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

#[test]
fn a_file_that_is_no_log_is_skipped_and_said_and_a_folder_takes_a_format() {
    let dir = TempDir::new();
    let rows: Vec<String> = (0..30)
        .map(|s| format!("{s},{}", 1.0 / (1.0 + s as f64)))
        .collect();
    dir.write("metrics.csv", format!("step,train_loss\n{}\n", rows.join("\n")));
    dir.write("classes.csv", "cat\ndog\n");
    let v = contrai(["doctor", "--json"]).arg(dir.path()).output().json();
    assert_eq!(v["runs"].as_array().unwrap().len(), 1, "{v}");
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{v}");
    assert!(
        skipped[0]["path"].as_str().unwrap().ends_with("classes.csv"),
        "{v}"
    );
    assert!(
        skipped[0]["reason"].as_str().unwrap().contains("unrecognised"),
        "{v}"
    );
    contrai(["doctor"])
        .arg(dir.path())
        .output()
        .assert_stdout_contains(&["skipped ", "classes.csv"]);
    // A folder with --format is searched for that format (it was "Is a directory").
    let v = contrai(["doctor", "--json", "--format", "csv"])
        .arg(dir.path())
        .output()
        .json();
    assert_eq!(v["runs"].as_array().unwrap().len(), 1, "{v}");
    contrai(["doctor", "--format", "jsonl"])
        .arg(dir.path())
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["no jsonl log found"]);
}
