//! `contrai plan` and `contrai report` end to end.

use crate::util;

use util::{TempDir, contrai, read_to_string};

#[test]
fn plan_json_has_phases_calendar_and_advice() {
    let out = contrai([
        "plan",
        "--json",
        "--weeks",
        "20",
        "--cost-per-day",
        "10",
        "--step-ms",
        "100",
    ])
    .output();
    let v = out.assert_success().json();
    let phases: Vec<&str> = v["plan"]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["validate", "main", "diagnose", "contract", "refine"]);
    let weeks: Vec<(u64, u64)> = v["calendar"]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["first_week"].as_u64().unwrap(),
                p["last_week"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(weeks, [(1, 3), (4, 12), (13, 14), (15, 18), (19, 20)]);
    assert_eq!(v["calendar"]["cost"], 1400.0);
    assert!(v["plan"]["advice"][0].as_str().unwrap().contains("300 M"));
    assert_eq!(v["wall_clock_s"][1][1], 40.0, "400 main steps at 100 ms");
}

#[test]
fn plan_calibrates_the_step_time_with_a_short_measured_run() {
    let dir = TempDir::new();
    let r = dir.write("tiny.toml", "[model]\nvocab = 64\nseq_len = 8\nd_model = 16\nheads = 2\nffn = 32\n\n[main]\nbatch = 4\naccumulate = 2\n\n[contract]\nbatch = 2\n");
    let out = contrai(["plan"]).arg(&r).args(["--calibrate", "--json"]).output();
    let v = out.assert_success().json();
    let ms = v["calibration"]["ms_per_step"].as_f64().unwrap();
    assert!(ms > 0.0 && ms.is_finite());
    assert_eq!(v["calibration"]["steps"], 20);
    let main_s = v["wall_clock_s"][1][1].as_f64().unwrap();
    assert!(
        (main_s - 400.0 * 2.0 * ms / 1000.0).abs() < 1e-6,
        "400 steps of 2 micro-batches"
    );
    let both = contrai(["plan", "--calibrate", "--step-ms", "5"]).output();
    assert_eq!(
        both.code(),
        Some(2),
        "--calibrate and --step-ms exclude each other\n{both}"
    );
}

#[test]
fn plan_refuses_bad_input_with_reasons() {
    contrai(["plan", "--weeks", "3"])
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["at least 5"]);
    let dir = TempDir::new();
    let r = dir.write("r.toml", "[contract]\nbudget = 0.5\n");
    contrai(["plan"])
        .arg(&r)
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["r.toml:2: `contract.budget` is 0.5"]);
}

#[test]
fn report_writes_an_html_file() {
    let dir = TempDir::new();
    let rows: Vec<String> = (1..=100)
        .map(|s| format!(r#"{{"step":{s},"train_loss":{}}}"#, 1.0 / s as f64))
        .collect();
    dir.write("metrics.jsonl", rows.join("\n"));
    contrai(["report"]).arg(dir.path()).output().assert_success();
    let html = read_to_string(dir.join("report.html"));
    assert!(html.contains("<svg") && html.contains("Findings"));
    contrai(["report"])
        .arg(dir.join("missing.json"))
        .output()
        .assert_code(2);
}
