//! `contrai data` end to end: exit codes, human and JSON output, files written, errors.

use std::process::{Command, Output};

fn contrai(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_contrai"))
        .args(args)
        .output()
        .expect("runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn audit_of_the_demo_leads_with_a_verdict_and_exits_1() {
    let out = contrai(&["data", "audit", "--demo"]);
    assert_eq!(out.status.code(), Some(1));
    let s = text(&out.stdout);
    assert!(s.starts_with("needs attention"), "{s}");
    assert!(
        s.contains("exact-duplicate groups") && s.contains("label conflicts"),
        "{s}"
    );
}

#[test]
fn audit_json_lists_every_cluster() {
    let out = contrai(&["data", "audit", "--demo", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let clusters = v["clusters"].as_array().unwrap();
    assert_eq!(clusters.len() as u64, v["duplicate_clusters"].as_u64().unwrap());
    assert!(clusters.len() > 10 && clusters[0]["ids"].as_array().unwrap().len() >= 2);
    assert_eq!(v["params"]["banding"]["bands"], 23);
}

#[test]
fn split_of_the_demo_writes_partitions_and_a_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("split");
    let out = contrai(&[
        "data",
        "split",
        "--demo",
        "--out",
        out_dir.to_str().unwrap(),
        "--seed",
        "3",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.contains("guard: 0 shared texts, 0 cross-partition near-duplicate pairs: no leak"),
        "{s}"
    );
    for f in ["train.jsonl", "val.jsonl", "holdout.jsonl", "manifest.json"] {
        assert!(out_dir.join(f).is_file(), "{f}");
    }
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["params"]["seed"], 3);
    assert_eq!(m["guard"]["passed"], true);
}

#[test]
fn demo_file_round_trips_through_audit() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("demo.jsonl");
    let out = contrai(&["data", "demo", "--out", f.to_str().unwrap(), "--base", "300"]);
    assert!(out.status.success());
    let out = contrai(&["data", "audit", f.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["rows"].as_u64().unwrap() > 300);
}

#[test]
fn bad_input_exits_2_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.jsonl");
    std::fs::write(&f, "{\"text\": \"fine words\"}\n{\"text\": oops}\n").unwrap();
    let out = contrai(&["data", "audit", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("bad.jsonl:2: invalid JSON"), "{err}");
    let out = contrai(&["data", "audit", f.to_str().unwrap(), "--skip-bad"]);
    assert!(text(&out.stdout).contains("1 malformed rows were skipped"));
    let out = contrai(&["data", "audit", dir.path().to_str().unwrap(), "--format", "jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("is a directory"));
    let out = contrai(&["data", "split", "--demo", "--out", "x", "--ratios", "0.5,0.5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("expected three ratios"));
}

#[test]
fn help_teaches_with_examples() {
    let out = contrai(&["data", "split", "--help"]);
    let s = text(&out.stdout);
    assert!(
        s.contains("Example: contrai data split") && s.contains("--on-conflict"),
        "{s}"
    );
}

#[test]
fn split_reads_a_headerless_tsv_with_columns_and_clears_leftovers() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("SMSSpamCollection");
    let rows: String = (0..60)
        .map(|i| {
            let label = if i % 4 == 0 { "spam" } else { "ham" };
            format!(
                "{label}\tmessage {i}: \"quoted\" words {} and more {}\n",
                i * 37 % 101,
                i * 13 % 29
            )
        })
        .collect();
    std::fs::write(&corpus, rows).unwrap();
    let corpus = corpus.to_str().unwrap();
    let out = dir.path().join("d");
    std::fs::create_dir(&out).unwrap();
    // What a split killed mid-write left, and a file of the user's.
    std::fs::write(out.join(".contrai-AbC123.tmp"), b"partial").unwrap();
    std::fs::write(out.join("notes.txt"), b"mine").unwrap();

    let no_format = contrai(&["data", "split", corpus, "--out", out.to_str().unwrap()]);
    assert_eq!(no_format.status.code(), Some(2));
    let err = text(&no_format.stderr);
    assert!(
        err.contains("without an extension") && err.contains("jsonl, csv, tsv or parquet"),
        "{err}"
    );

    let ok = contrai(&[
        "data",
        "split",
        corpus,
        "--format",
        "tsv",
        "--columns",
        "label,text",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = text(&ok.stderr);
    assert!(ok.status.success(), "{err}");
    assert!(
        err.contains("removed") && err.contains(".contrai-AbC123.tmp"),
        "{err}"
    );
    assert!(!out.join(".contrai-AbC123.tmp").exists());
    assert_eq!(std::fs::read(out.join("notes.txt")).unwrap(), b"mine");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let total: u64 = manifest["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["count"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 60, "the first line is a row");
    assert_eq!(manifest["format"], "tsv");
    let train = std::fs::read_to_string(out.join("train.tsv")).unwrap();
    assert!(
        train.starts_with("label\ttext\n") && train.contains("\"quoted\""),
        "{train}"
    );
}
