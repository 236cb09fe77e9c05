//! `contrai data` end to end: exit codes, human and JSON output, files written, errors.

use crate::util;

use serde_json::Value;
use util::{TempDir, contrai, read_json, read_to_string};

#[test]
fn audit_of_the_demo_leads_with_a_verdict_and_exits_1() {
    let out = contrai(["data", "audit", "--demo"]).output();
    out.assert_code(1)
        .assert_stdout_contains(&["exact-duplicate groups", "label conflicts"]);
    assert!(out.stdout.starts_with("needs attention"), "{out}");
}

#[test]
fn audit_json_lists_every_cluster() {
    let v = contrai(["data", "audit", "--demo", "--json"]).output().json();
    let clusters = v["clusters"].as_array().unwrap();
    assert_eq!(clusters.len() as u64, v["duplicate_clusters"].as_u64().unwrap());
    assert!(clusters.len() > 10 && clusters[0]["ids"].as_array().unwrap().len() >= 2);
    assert_eq!(v["params"]["banding"]["bands"], 32);
    assert_eq!(v["params"]["edit_banding"]["bands"], 64);
    assert_eq!(v["params"]["edits"]["share"], 0.05);
}

#[test]
fn split_of_the_demo_writes_partitions_and_a_manifest() {
    let dir = TempDir::new();
    let out_dir = dir.join("split");
    let out = contrai(["data", "split", "--demo", "--out"])
        .arg(&out_dir)
        .args(["--seed", "3"])
        .output();
    out.assert_success()
        .assert_stdout_contains(&["guard: 0 shared texts, 0 cross-partition near-duplicate pairs: no leak"]);
    for f in ["train.jsonl", "val.jsonl", "holdout.jsonl", "manifest.json"] {
        assert!(out_dir.join(f).is_file(), "{f}");
    }
    let m = read_json(out_dir.join("manifest.json"));
    assert_eq!(m["params"]["seed"], 3);
    assert_eq!(m["guard"]["passed"], true);
}

#[test]
fn demo_file_round_trips_through_audit() {
    let dir = TempDir::new();
    let f = dir.join("demo.jsonl");
    contrai(["data", "demo", "--out"])
        .arg(&f)
        .args(["--base", "300"])
        .output()
        .assert_success();
    let v = contrai(["data", "audit"]).arg(&f).arg("--json").output().json();
    assert!(v["rows"].as_u64().unwrap() > 300);
}

#[test]
fn bad_input_exits_2_with_file_and_line() {
    let dir = TempDir::new();
    let f = dir.write("bad.jsonl", "{\"text\": \"fine words\"}\n{\"text\": oops}\n");
    contrai(["data", "audit"])
        .arg(&f)
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["bad.jsonl:2: invalid JSON"]);
    contrai(["data", "audit"])
        .arg(&f)
        .arg("--skip-bad")
        .output()
        .assert_stdout_contains(&["1 malformed rows were skipped"]);
    contrai(["data", "audit"])
        .arg(dir.path())
        .args(["--format", "jsonl"])
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["is a directory"]);
    contrai(["data", "split", "--demo", "--out", "x", "--ratios", "0.5,0.5"])
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["expected three ratios"]);
}

#[test]
fn help_teaches_with_examples() {
    contrai(["data", "split", "--help"])
        .output()
        .assert_stdout_contains(&["Example: contrai data split", "--on-conflict"]);
}

#[test]
fn split_reads_a_headerless_tsv_with_columns_and_clears_leftovers() {
    let dir = TempDir::new();
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
    let corpus = dir.write("SMSSpamCollection", rows);
    let out = dir.join("d");
    // What a split killed mid-write left beside its output.
    dir.mkdir(".d.contrai-AbC123.tmp");
    dir.write(".d.contrai-AbC123.tmp/train.tsv", b"partial");

    contrai(["data", "split"])
        .arg(&corpus)
        .arg("--out")
        .arg(&out)
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["without an extension", "jsonl, csv, tsv or parquet"]);

    contrai(["data", "split"])
        .arg(&corpus)
        .args(["--format", "tsv", "--columns", "label,text", "--out"])
        .arg(&out)
        .output()
        .assert_success()
        .assert_stderr_contains(&["removed", ".d.contrai-AbC123.tmp"]);
    assert!(!dir.join(".d.contrai-AbC123.tmp").exists());
    // A folder of the user's that is not a split is never replaced, --force or not.
    dir.mkdir("notes");
    let mine = dir.write("notes/notes.txt", b"mine");
    contrai(["data", "split"])
        .arg(&corpus)
        .args(["--format", "tsv", "--columns", "label,text", "--force", "--out"])
        .arg(dir.join("notes"))
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["not a split", "notes.txt"]);
    assert_eq!(std::fs::read(&mine).unwrap(), b"mine");
    assert_eq!(std::fs::read_dir(dir.join("notes")).unwrap().count(), 1);
    let manifest = read_json(out.join("manifest.json"));
    let total: u64 = manifest["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["count"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 60, "the first line is a row");
    assert_eq!(manifest["format"], "tsv");
    let train = read_to_string(out.join("train.tsv"));
    assert!(
        train.starts_with("label\ttext\n") && train.contains("\"quoted\""),
        "{train}"
    );
}

#[test]
fn a_new_version_takes_its_parents_settings_and_refuses_other_ones() {
    let dir = TempDir::new();
    let v1_data = dir.join("v1.jsonl");
    contrai(["data", "demo", "--base", "300", "--out"])
        .arg(&v1_data)
        .output()
        .assert_success();
    let v1 = dir.join("v1");
    contrai(["data", "split"])
        .arg(&v1_data)
        .args(["--seed", "7", "--ratios", "0.7,0.2,0.1", "--out"])
        .arg(&v1)
        .output()
        .assert_success();
    let mut grown = read_to_string(&v1_data);
    grown.push_str("{\"id\":\"late-1\",\"text\":\"a review written long after the first split of this data\",\"label\":\"positive\"}\n");
    let v2_data = dir.write("v2.jsonl", grown);
    let v2 = dir.join("v2");
    contrai(["data", "split"])
        .arg(&v2_data)
        .arg("--from")
        .arg(&v1)
        .arg("--out")
        .arg(&v2)
        .output()
        .assert_success()
        .assert_stdout_contains(&["version 2 of", "gone [0, 0, 0]"]);
    let m = read_json(v2.join("manifest.json"));
    assert_eq!(
        (m["version"].as_u64(), m["params"]["seed"].as_u64()),
        (Some(2), Some(7))
    );
    let v3 = dir.join("v3");
    contrai(["data", "split"])
        .arg(&v2_data)
        .args(["--seed", "8", "--from"])
        .arg(&v1)
        .arg("--out")
        .arg(&v3)
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["seed 7", "this version 8"]);
    assert!(!v3.exists(), "nothing written");
}

#[test]
fn drift_exits_by_its_verdict_writes_a_page_and_refuses_another_schema() {
    let dir = TempDir::new();
    let old = dir.join("old.jsonl");
    contrai(["data", "demo", "--base", "400", "--out"])
        .arg(&old)
        .output()
        .assert_success();
    contrai(["data", "drift"])
        .arg(&old)
        .arg(&old)
        .output()
        .assert_code(0)
        .assert_stdout_contains(&["no drift"]);
    // The new version: only the positive reviews.
    let positive: String = read_to_string(&old)
        .lines()
        .filter(|l| l.contains("\"positive\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let new = dir.write("new.jsonl", positive);
    let page = dir.join("drift.html");
    let out = contrai(["data", "drift"])
        .arg(&old)
        .arg(&new)
        .arg("--html")
        .arg(&page)
        .output();
    out.assert_code(1)
        .assert_stdout_contains(&["drift:", "labels shifted"]);
    let html = read_to_string(&page);
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.contains("labels shifted"),
        "{html}"
    );
    let v = contrai(["data", "drift"])
        .arg(&old)
        .arg(&new)
        .arg("--json")
        .output()
        .json();
    assert_eq!(v["drifted"], true);
    assert!(v["rows"]["removed"].as_u64().unwrap() > 100);
    let other = dir.write(
        "other.jsonl",
        "{\"id\": \"1\", \"body\": \"some words\", \"label\": \"x\"}\n",
    );
    let page2 = dir.join("other.html");
    contrai(["data", "drift"])
        .arg(&old)
        .arg(&other)
        .arg("--html")
        .arg(&page2)
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["differ in schema", "only in the new: body"]);
    assert!(!page2.exists(), "nothing written");
}

#[test]
fn audit_against_an_evaluation_set_finds_its_passages_and_split_drops_them() {
    let dir = TempDir::new();
    let data = dir.join("train.jsonl");
    contrai(["data", "demo", "--base", "300", "--out"])
        .arg(&data)
        .output()
        .assert_success();
    let passage = "zorblat quentish maravel dunsoke plimber vantrose keltish oberand swillow frantic nebulon carrow tindle mossop";
    let mut rows = read_to_string(&data);
    rows.push_str(&format!(
        "{{\"id\":\"leak-1\",\"text\":\"as the benchmark says {passage} indeed\",\"label\":\"positive\"}}\n"
    ));
    std::fs::write(&data, rows).unwrap();
    let bench = dir.write("bench.csv", format!("id,question\nb1,\"Q: {passage} ?\"\n"));
    let arg = format!("{}:question", bench.display());
    let v = contrai(["data", "audit"])
        .arg(&data)
        .args(["--against", &arg, "--json"])
        .output()
        .json();
    assert_eq!(v["contamination"]["contaminated"], 1);
    assert_eq!(v["contamination"]["hits"][0]["id"], "leak-1");
    assert!(v["clusters"].is_array(), "the audit report is still there");
    let out = dir.join("split");
    contrai(["data", "split"])
        .arg(&data)
        .args(["--against", &arg, "--out"])
        .arg(&out)
        .output()
        .assert_success()
        .assert_stdout_contains(&["1 samples matched (13-grams or near-duplicates), dropped"]);
    assert_eq!(read_json(out.join("manifest.json"))["dropped"]["contaminated"], 1);
    let bad = dir.write("bench.xml", "<q/>");
    let out2 = dir.join("split2");
    contrai(["data", "split"])
        .arg(&data)
        .arg("--against")
        .arg(&bad)
        .arg("--out")
        .arg(&out2)
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["bench.xml", "evaluation set"]);
    assert!(!out2.exists(), "nothing written");
}

/// The file names in a folder, sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

#[test]
fn a_split_already_in_out_is_replaced_only_with_force_and_whole() {
    let dir = TempDir::new();
    let jsonl = dir.join("reviews.jsonl");
    contrai(["data", "demo", "--base", "300", "--out"])
        .arg(&jsonl)
        .output()
        .assert_success();
    let out = dir.join("split");
    contrai(["data", "split"])
        .arg(&jsonl)
        .arg("--out")
        .arg(&out)
        .output()
        .assert_success();
    let before = read_to_string(out.join("manifest.json"));
    // The same data as CSV, into the same folder: refused, naming the split that is there.
    let csv = dir.join("reviews.csv");
    let rows: Vec<Value> = read_to_string(&jsonl)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut text = String::from("id,text,label\n");
    for r in &rows {
        let q = |k: &str| format!("\"{}\"", r[k].as_str().unwrap().replace('"', "\"\""));
        text.push_str(&format!("{},{},{}\n", q("id"), q("text"), q("label")));
    }
    std::fs::write(&csv, text).unwrap();
    contrai(["data", "split"])
        .arg(&csv)
        .arg("--out")
        .arg(&out)
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["manifest.json", "a split is already there", "--force"]);
    assert_eq!(read_to_string(out.join("manifest.json")), before);
    // With --force the folder is the new split alone: no train.jsonl beside train.csv.
    contrai(["data", "split"])
        .arg(&csv)
        .args(["--force", "--out"])
        .arg(&out)
        .output()
        .assert_success();
    assert_eq!(
        names(&out),
        ["holdout.csv", "manifest.json", "train.csv", "val.csv"]
    );
    // --keep-previous keeps the replaced one beside it.
    contrai(["data", "split"])
        .arg(&jsonl)
        .args(["--keep-previous", "--out"])
        .arg(&out)
        .output()
        .assert_success();
    assert_eq!(
        read_to_string(out.join("manifest.json")),
        before,
        "the same input, the same bytes"
    );
    assert_eq!(
        names(&dir.join("split.prev")),
        ["holdout.csv", "manifest.json", "train.csv", "val.csv"]
    );
    let beside: Vec<String> = names(dir.path())
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(beside.is_empty(), "nothing left beside it: {beside:?}");
}

/// What a split folder holds, checked against its manifest: the input it was made from, when
/// its files are exactly the manifest's and match their checksums.
fn whole_split(out: &std::path::Path) -> Result<String, String> {
    let m = read_json(out.join("manifest.json"));
    let mut want = vec!["manifest.json".to_string()];
    for p in m["partitions"].as_array().unwrap() {
        if p["count"].as_u64().unwrap() > 0 {
            let file = p["file"].as_str().unwrap();
            let bytes = std::fs::read(out.join(file)).map_err(|e| format!("{file}: {e}"))?;
            let sum = format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&bytes));
            if sum != p["file_xxh3"].as_str().unwrap() {
                return Err(format!("{file} does not match the manifest"));
            }
            want.push(file.to_string());
        }
    }
    want.sort();
    let got = names(out);
    if got != want {
        return Err(format!("files {got:?}, the manifest names {want:?}"));
    }
    Ok(m["source"].as_str().unwrap().to_string())
}

#[test]
fn a_split_killed_at_any_point_of_its_commit_leaves_the_old_split_or_the_new_one() {
    let dir = TempDir::new();
    let old_data = dir.join("old.jsonl");
    contrai(["data", "demo", "--base", "400", "--seed", "1", "--out"])
        .arg(&old_data)
        .output()
        .assert_success();
    let new_data = dir.join("new.jsonl");
    contrai(["data", "demo", "--base", "500", "--seed", "2", "--out"])
        .arg(&new_data)
        .output()
        .assert_success();
    let out = dir.join("split");
    let fresh = |out: &std::path::Path| {
        if out.exists() {
            std::fs::remove_dir_all(out).unwrap();
        }
        contrai(["data", "split"])
            .arg(&old_data)
            .arg("--out")
            .arg(out)
            .output()
            .assert_success();
    };
    // Each step of the commit waits 150 ms, so that kills land between its steps.
    let replace = || {
        contrai(["data", "split"])
            .arg(&new_data)
            .args(["--force", "--out"])
            .arg(&out)
            .env("CONTRAI_SLOW_COMMIT_MS", "150")
    };
    // The commit starts once the new split's manifest is written in its folder beside `out`.
    let committing = || {
        names(dir.path())
            .iter()
            .any(|n| n.starts_with(".split.contrai-") && dir.join(n).join("manifest.json").exists())
    };
    let (mut old, mut new) = (0, 0);
    for i in 0..20u32 {
        fresh(&out);
        let mut running = replace().spawn();
        let waiting = std::time::Instant::now();
        while !committing() {
            assert!(
                waiting.elapsed().as_secs() < 120,
                "the split never reached its commit"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        // 0 to 380 ms into a commit of two 150 ms waits: before the swap, after it, after the
        // old split is removed.
        let at = std::time::Duration::from_millis(u64::from(i) * 20);
        std::thread::sleep(at);
        running.kill();
        running.wait();
        match whole_split(&out) {
            Ok(source) if source.ends_with("old.jsonl") => old += 1,
            Ok(source) if source.ends_with("new.jsonl") => new += 1,
            other => panic!("killed {at:?} into the commit: {other:?}"),
        }
    }
    eprintln!("20 kills: {old} left the old split, {new} the new one");
    assert!(
        old > 0 && new > 0,
        "the kills straddle the commit ({old} old, {new} new)"
    );
    // The next split clears what the killed ones left beside the folder.
    replace()
        .env_remove("CONTRAI_SLOW_COMMIT_MS")
        .output()
        .assert_success();
    assert!(whole_split(&out).unwrap().ends_with("new.jsonl"));
    let beside: Vec<String> = names(dir.path())
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(beside.is_empty(), "{beside:?}");
}
