//! Decontamination: training samples that carry a benchmark passage (a shared 13-gram) or are
//! near-copies of a benchmark item are all found and dropped by the split; a clean control
//! benchmark finds nothing; an evaluation set in an unknown format is refused.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use contrai_data::contamination::{ContaminationConfig, EvalSet, Evidence, check};
use contrai_data::demo::{DemoConfig, generate};
use contrai_data::split::{SplitConfig, split};
use contrai_data::{FieldSpec, Silent, Source};
use serde_json::json;

/// Pseudo-words no demo review uses.
fn words(seed: u64, n: usize) -> Vec<String> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let syll = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su"];
            (0..3).map(|k| syll[((x >> (k * 8)) % 10) as usize]).collect()
        })
        .collect()
}

/// A benchmark of 100 items of 40 pseudo-words and 40 of 6, as a JSONL file with a `question`
/// field.
fn benchmark(dir: &Path, name: &str, seed: u64) -> (PathBuf, Vec<String>) {
    let items: Vec<String> = (0..140)
        .map(|i| words(seed * 1000 + i as u64, if i < 100 { 40 } else { 6 }).join(" "))
        .collect();
    let path = dir.join(name);
    let lines: String = items
        .iter()
        .enumerate()
        .map(|(i, q)| format!("{}\n", json!({"id": format!("q{i}"), "question": q})))
        .collect();
    std::fs::write(&path, lines).unwrap();
    (path, items)
}

/// The demo reviews plus planted contamination: 30 reviews carrying a 20-word passage of a long
/// benchmark item, and 20 near-copies of short items (too short to share a 13-gram: a
/// capital and a question mark added). Their ids.
fn planted(items: &[String]) -> (Vec<String>, HashSet<String>) {
    let mut lines = generate(DemoConfig { base: 1200, seed: 3 }).lines;
    let mut ids = HashSet::new();
    for (k, item) in items.iter().take(30).enumerate() {
        let passage: Vec<&str> = item.split(' ').skip(5).take(20).collect();
        let id = format!("passage-{k}");
        let text = format!(
            "I read this somewhere and liked it: {} and then bought it",
            passage.join(" ")
        );
        lines.push(json!({"id": id, "text": text, "label": "positive"}).to_string());
        ids.insert(id);
    }
    for (k, item) in items.iter().skip(100).take(20).enumerate() {
        let id = format!("near-{k}");
        let text = format!("{}{}?", item[..1].to_uppercase(), &item[1..]);
        lines.push(json!({"id": id, "text": text, "label": "negative"}).to_string());
        ids.insert(id);
    }
    (lines, ids)
}

fn memory(lines: Vec<String>) -> Source {
    Source::Memory {
        name: "<train>".into(),
        lines: std::sync::Arc::new(lines),
    }
}

#[test]
fn every_planted_overlap_is_found_and_a_clean_control_finds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (bench, items) = benchmark(dir.path(), "bench.jsonl", 1);
    let (control, _) = benchmark(dir.path(), "control.jsonl", 2);
    let (lines, planted_ids) = planted(&items);
    let sets = vec![
        EvalSet::parse(&format!("{}:question", bench.display()), "text").unwrap(),
        EvalSet::parse(&format!("{}:question", control.display()), "text").unwrap(),
    ];
    let found = check(
        &memory(lines.clone()),
        &FieldSpec::default(),
        &sets,
        &ContaminationConfig::default(),
        None,
        &Silent,
    )
    .unwrap();
    let hit_ids: HashSet<String> = found.hits.iter().map(|h| h.id.clone()).collect();
    assert_eq!(hit_ids, planted_ids, "every planted sample, and nothing else");
    assert_eq!((found.sets[0].by_ngram, found.sets[0].by_near), (30, 20));
    assert_eq!(
        (found.sets[1].by_ngram, found.sets[1].by_near),
        (0, 0),
        "the clean control"
    );
    for h in &found.hits {
        if h.id.starts_with("passage") {
            assert!(
                matches!(&h.evidence, Evidence::Ngram(w) if w.split(' ').count() == 13),
                "{h:?}"
            );
        }
    }
    // The split drops them from every partition and counts them in the manifest.
    let out = dir.path().join("split");
    let cfg = SplitConfig {
        against: sets,
        ..SplitConfig::default()
    };
    let m = split(memory(lines), &out, &cfg, &Silent).unwrap().manifest;
    assert_eq!(m.dropped["contaminated"], 50);
    let record = m.contamination.unwrap();
    assert_eq!(
        (record.ngram, record.sets[0].matched, record.sets[1].matched),
        (13, 50, 0)
    );
    let written: String = ["train", "val", "holdout"]
        .iter()
        .map(|p| std::fs::read_to_string(out.join(format!("{p}.jsonl"))).unwrap_or_default())
        .collect();
    assert!(
        planted_ids
            .iter()
            .all(|id| !written.contains(&format!("\"{id}\"")))
    );
}

#[test]
fn an_evaluation_set_in_an_unknown_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.xml");
    std::fs::write(&path, "<items/>").unwrap();
    let err = EvalSet::parse(path.to_str().unwrap(), "text")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bench.xml") && err.contains("evaluation set") && err.contains(".jsonl"),
        "{err}"
    );
    let missing = EvalSet::parse(dir.path().join("gone.jsonl").to_str().unwrap(), "text").map(|_| ());
    let err = check(
        &memory(vec!["{\"text\": \"a b c\"}".into()]),
        &FieldSpec::default(),
        &[EvalSet::parse(dir.path().join("gone.jsonl").to_str().unwrap(), "text").unwrap()],
        &ContaminationConfig::default(),
        None,
        &Silent,
    );
    assert!(missing.is_ok() && err.unwrap_err().to_string().contains("gone.jsonl"));
}
