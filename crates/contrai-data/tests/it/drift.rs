//! Drift between two versions: a planted label shift and a planted new topic are found, an
//! unchanged copy reports none, splits are compared partition by partition, schemas must match,
//! and on the real corpus random halves do not drift while its ham-then-spam halves do.

use std::path::Path;
use std::sync::Arc;

use contrai_data::demo::{DemoConfig, generate};
use contrai_data::drift::{DriftConfig, DriftReport, Version, drift};
use contrai_data::split::{SplitConfig, split};
use contrai_data::{Silent, Source};
use serde_json::{Value, json};

fn memory(name: &str, lines: Vec<String>) -> Version {
    Version::File(Source::Memory {
        name: name.into(),
        lines: Arc::new(lines),
    })
}

fn compare(old: &Version, new: &Version) -> DriftReport {
    drift(old, new, &DriftConfig::default(), &Silent).unwrap()
}

fn demo_lines(base: usize, seed: u64) -> Vec<String> {
    generate(DemoConfig { base, seed }).lines
}

/// Words of a topic the demo never speaks of.
const TOPIC: [&str; 10] = [
    "battery",
    "charger",
    "voltage",
    "cable",
    "firmware",
    "bluetooth",
    "pairing",
    "adapter",
    "usb",
    "socket",
];

/// Reviews of that topic, in varied sentences.
fn new_topic(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let text: Vec<&str> = (0..14)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    TOPIC[(x % TOPIC.len() as u64) as usize]
                })
                .collect();
            json!({"id": format!("topic-{i:04}"), "text": format!("the {} works", text.join(" ")), "label": "positive"})
                .to_string()
        })
        .collect()
}

#[test]
fn an_unchanged_copy_reports_no_drift() {
    let lines = demo_lines(800, 3);
    let mut shuffled = lines.clone();
    shuffled.reverse();
    let r = compare(&memory("a", lines), &memory("b", shuffled));
    assert!(!r.drifted, "{r}");
    assert_eq!((r.rows.added, r.rows.removed, r.rows.changed), (0, 0, 0));
    let all = &r.partitions[0];
    assert_eq!(all.vocabulary.as_ref().unwrap().jsd, 0.0);
    assert_eq!(all.labels.as_ref().unwrap().chi_square, 0.0);
    assert!(
        r.verdict.starts_with("no drift: the versions hold the same"),
        "{}",
        r.verdict
    );
}

#[test]
fn a_planted_label_shift_and_a_planted_topic_are_both_found() {
    let old = demo_lines(1500, 3);
    // The new version: two thirds of the negative reviews gone, a new topic arrived, and one
    // review relabelled.
    let mut new: Vec<String> = Vec::new();
    let mut negatives = 0;
    for l in &old {
        let v: Value = serde_json::from_str(l).unwrap();
        if v["label"] == "negative" {
            negatives += 1;
            if negatives % 3 != 0 {
                continue;
            }
        }
        new.push(l.clone());
    }
    let mut flipped: Value = serde_json::from_str(&new[0]).unwrap();
    flipped["label"] = if flipped["label"] == "positive" {
        "negative"
    } else {
        "positive"
    }
    .into();
    new[0] = flipped.to_string();
    new.extend(new_topic(200));
    let r = compare(&memory("old", old.clone()), &memory("new", new));
    assert!(r.drifted, "{r}");
    let all = &r.partitions[0];
    let labels = all.labels.as_ref().unwrap();
    assert!(labels.shifted && labels.p_value < 1e-6, "{r}");
    assert!((labels.largest_move.1 - labels.largest_move.2).abs() > 0.2, "{r}");
    let vocab = all.vocabulary.as_ref().unwrap();
    assert!(vocab.shifted && vocab.ratio > 3.0, "{r}");
    let top: Vec<&str> = vocab.moved.iter().take(6).map(|g| g.gram.as_str()).collect();
    assert!(
        top.iter().filter(|g| TOPIC.iter().any(|t| g.contains(t))).count() >= 4,
        "{top:?}"
    );
    assert_eq!(r.rows.changed, 1);
    assert_eq!(r.rows.added, 200);
    assert!(r.rows.removed > 100);
    // The same new topic alone, labels untouched: the vocabulary shift without a label shift.
    let mut grown = old.clone();
    grown.extend(new_topic(200));
    let r = compare(&memory("old", old), &memory("grown", grown));
    let all = &r.partitions[0];
    assert!(
        all.vocabulary.as_ref().unwrap().shifted && !r.findings.is_empty(),
        "{r}"
    );
    assert!(r.findings.iter().all(|f| !f.contains("labels shifted")), "{r}");
}

#[test]
fn two_splits_are_compared_partition_by_partition() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("v1"), dir.path().join("v2"));
    let old = demo_lines(900, 5);
    let src = |lines: Vec<String>| Source::Memory {
        name: "<test>".into(),
        lines: Arc::new(lines),
    };
    split(src(old.clone()), &a, &SplitConfig::default(), &Silent).unwrap();
    let mut grown = old;
    grown.extend(new_topic(300));
    let cfg = SplitConfig {
        parent: Some(a.clone()),
        ..SplitConfig::default()
    };
    split(src(grown), &b, &cfg, &Silent).unwrap();
    let r = compare(
        &Version::open(&a, None).unwrap(),
        &Version::open(&b, None).unwrap(),
    );
    let names: Vec<&str> = r.partitions.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["train", "val", "holdout", "all"]);
    assert_eq!(r.rows.removed, 0, "a version keeps its parent's samples");
    assert!(r.partitions[0].vocabulary.as_ref().unwrap().shifted, "{r}");
}

#[test]
fn versions_with_different_fields_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, rows: &[Value]| {
        let path = dir.path().join(name);
        let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(&path, text).unwrap();
        path
    };
    let a = write(
        "a.jsonl",
        &[json!({"id": "1", "text": "some words here", "label": "x"})],
    );
    let b = write(
        "b.jsonl",
        &[json!({"id": "1", "body": "some words here", "label": "x"})],
    );
    let err = drift(
        &Version::open(&a, None).unwrap(),
        &Version::open(&b, None).unwrap(),
        &DriftConfig::default(),
        &Silent,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("differ in schema") && err.contains("only in the old version: text"),
        "{err}"
    );
    assert!(err.contains("only in the new: body"), "{err}");
}

/// The real corpus cut in two: at random (no drift), and as it is ordered (ham first).
#[test]
fn real_mail_drifts_only_where_it_really_changes() {
    let Some(path) = contrai_testkit::shared("data/spamassassin.jsonl") else {
        return;
    };
    let lines: Vec<String> = std::fs::read_to_string(Path::new(&path))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let half = lines.len() / 2;
    // A fixed interleaving: even rows against odd rows.
    let (evens, odds): (Vec<_>, Vec<_>) = lines.iter().cloned().enumerate().partition(|(i, _)| i % 2 == 0);
    let strip = |v: Vec<(usize, String)>| v.into_iter().map(|(_, l)| l).collect::<Vec<_>>();
    let r = compare(&memory("even", strip(evens)), &memory("odd", strip(odds)));
    assert!(!r.drifted, "{r}");
    let r = compare(
        &memory("first", lines[..half].to_vec()),
        &memory("second", lines[half..].to_vec()),
    );
    assert!(r.drifted, "{r}");
    assert!(r.findings.iter().any(|f| f.contains("labels shifted")), "{r}");
}
