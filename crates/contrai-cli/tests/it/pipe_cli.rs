//! Output piped into a reader that stops early (`contrai plan | head -1`): every subcommand that
//! prints ends quietly — exit 0 or 141 (a closed pipe), no panic, no backtrace.

use crate::util;

use util::{TempDir, contrai};

/// Runs `args` with stdout closed before the first byte; fails on a panic or another exit.
fn ends_quietly(args: &[&str], dir: &TempDir) {
    let (code, stderr) = contrai(args).current_dir(dir.path()).with_stdout_closed();
    assert!(
        matches!(code, Some(0 | 1 | 141)),
        "contrai {}: exit {code:?}, stderr:\n{stderr}",
        args.join(" ")
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "contrai {}: {stderr}",
        args.join(" ")
    );
}

#[test]
fn every_printing_subcommand_ends_quietly_when_its_reader_stops() {
    let dir = TempDir::new();
    contrai(["data", "demo", "--out", "reviews.jsonl", "--base", "300"])
        .current_dir(dir.path())
        .output()
        .assert_success();
    contrai([
        "data",
        "demo",
        "--out",
        "reviews2.jsonl",
        "--base",
        "300",
        "--seed",
        "8",
    ])
    .current_dir(dir.path())
    .output()
    .assert_success();
    let recipe = contrai(["recipe", "init"])
        .output()
        .assert_success()
        .stdout
        .clone();
    dir.write("recipe.toml", recipe);
    let rows: Vec<String> = (1..=200)
        .map(|s| format!(r#"{{"step":{s},"train_loss":{}}}"#, 1.0 / s as f64))
        .collect();
    dir.mkdir("log");
    dir.write("log/metrics.jsonl", rows.join("\n"));
    for args in [
        &["data", "audit", "--demo"][..],
        &["data", "audit", "--demo", "--json"],
        &["data", "audit", "reviews.jsonl"],
        &["data", "split", "reviews.jsonl", "--out", "split"],
        &["data", "drift", "reviews.jsonl", "reviews2.jsonl"],
        &["recipe", "init"],
        &["recipe", "check", "recipe.toml"],
        &["check", "recipe.toml"],
        &["plan"],
        &["plan", "--json"],
        &["doctor", "log"],
        &["doctor", "log", "--json"],
        &["report", "log"],
        &["--help"],
        &["doctor", "--help"],
    ] {
        ends_quietly(args, &dir);
    }
}
