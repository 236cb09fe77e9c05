//! The split: no leaks, a locked holdout, stable placement, determinism, every format.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use contrai_data::demo::{DemoConfig, DemoSet, generate};
use contrai_data::split::{Dedup, OnConflict, SplitConfig, split};
use contrai_data::text::{Shingling, jaccard, normalize};
use contrai_data::{FieldSpec, Format, Silent, Source};
use serde_json::Value;

fn demo(base: usize, seed: u64) -> DemoSet {
    generate(DemoConfig { base, seed })
}

fn rows(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// (partition, id, text) of every written row.
fn written(dir: &Path) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    for (p, name) in ["train", "val", "holdout"].iter().enumerate() {
        let f = dir.join(format!("{name}.jsonl"));
        if f.exists() {
            for r in rows(&f) {
                out.push((
                    p,
                    r["id"].as_str().unwrap().into(),
                    r["text"].as_str().unwrap().into(),
                ));
            }
        }
    }
    out
}

fn memory(lines: Vec<String>) -> Source {
    Source::Memory {
        name: "<test>".into(),
        lines: Arc::new(lines),
    }
}

#[test]
fn no_sample_or_near_duplicate_crosses_partitions() {
    let set = demo(2000, 5);
    let dir = tempfile::tempdir().unwrap();
    let out = split(set.source(), dir.path(), &SplitConfig::default(), &Silent).unwrap();
    assert!(out.manifest.guard.passed);
    let rows = written(dir.path());
    let counts: Vec<usize> = (0..3).map(|p| rows.iter().filter(|r| r.0 == p).count()).collect();
    assert!(
        counts[0] > counts[1] && counts[1] > 0 && counts[2] > 0,
        "{counts:?}"
    );
    // Brute force over every cross-partition pair.
    let sh = Shingling::default();
    let norm: Vec<String> = rows.iter().map(|r| normalize(&r.2)).collect();
    let sets: Vec<Vec<u64>> = norm.iter().map(|n| sh.shingles(n)).collect();
    let mut leaks = Vec::new();
    for i in 0..rows.len() {
        for j in i + 1..rows.len() {
            if rows[i].0 != rows[j].0 && (norm[i] == norm[j] || jaccard(&sets[i], &sets[j]) >= 0.85) {
                leaks.push((rows[i].1.clone(), rows[j].1.clone()));
            }
        }
    }
    assert!(leaks.is_empty(), "leaks: {leaks:?}");
    // The planted families, which a random split would scatter, sit in one partition each
    // (members clearly similar to their original, J ≥ 0.85).
    let part: HashMap<&str, usize> = rows.iter().map(|r| (r.1.as_str(), r.0)).collect();
    let text = |i: usize| {
        normalize(
            serde_json::from_str::<Value>(&set.lines[i]).unwrap()["text"]
                .as_str()
                .unwrap(),
        )
    };
    let id = |i: usize| format!("rev-{:06}", i + 1);
    let mut checked = 0;
    for fam in &set.truth.families {
        let origin = sh.shingles(&text(fam[0]));
        let close: Vec<usize> = fam
            .iter()
            .copied()
            .filter(|&m| jaccard(&origin, &sh.shingles(&text(m))) >= 0.85)
            .collect();
        let parts: HashSet<usize> = close
            .iter()
            .filter_map(|&m| part.get(id(m).as_str()).copied())
            .collect();
        assert!(parts.len() <= 1, "family {close:?} spans {parts:?}");
        checked += close.len();
    }
    assert!(checked > 2 * set.truth.families.len());
}

#[test]
fn conflicts_and_duplicates_follow_the_policies() {
    let set = demo(1500, 9);
    let dir = tempfile::tempdir().unwrap();
    let drop = split(set.source(), dir.path(), &SplitConfig::default(), &Silent)
        .unwrap()
        .manifest;
    assert!(drop.dropped["conflict"] >= 2 * set.truth.conflicts.len() as u64);
    assert!(drop.dropped["duplicate"] > 0);
    let ids: HashSet<String> = written(dir.path()).into_iter().map(|r| r.1).collect();
    for &(a, b) in &set.truth.conflicts {
        for m in [a, b] {
            assert!(
                !ids.contains(&format!("rev-{:06}", m + 1)),
                "conflicting {m} was written"
            );
        }
    }
    let keep_cfg = SplitConfig {
        on_conflict: OnConflict::Keep,
        dedup: Dedup::None,
        ..SplitConfig::default()
    };
    let dir2 = tempfile::tempdir().unwrap();
    let keep = split(set.source(), dir2.path(), &keep_cfg, &Silent)
        .unwrap()
        .manifest;
    assert_eq!(keep.dropped["conflict"] + keep.dropped["duplicate"], 0);
    let total: u64 = keep.partitions.iter().map(|p| p.count).sum();
    assert_eq!(total + keep.dropped["empty"], set.lines.len() as u64);
    let near_cfg = SplitConfig {
        dedup: Dedup::Near,
        on_conflict: OnConflict::Majority,
        ..SplitConfig::default()
    };
    let dir3 = tempfile::tempdir().unwrap();
    let near = split(set.source(), dir3.path(), &near_cfg, &Silent)
        .unwrap()
        .manifest;
    assert!(near.dropped["duplicate"] > drop.dropped["duplicate"]);
}

#[test]
fn two_runs_write_identical_bytes() {
    let set = demo(800, 2);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    split(set.source(), a.path(), &SplitConfig::default(), &Silent).unwrap();
    split(set.source(), b.path(), &SplitConfig::default(), &Silent).unwrap();
    for f in ["train.jsonl", "val.jsonl", "holdout.jsonl", "manifest.json"] {
        assert_eq!(
            std::fs::read(a.path().join(f)).unwrap(),
            std::fs::read(b.path().join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn samples_keep_their_partition_when_unrelated_rows_are_added() {
    let set = demo(1000, 3);
    let other = demo(400, 77);
    let mut grown = set.lines.clone();
    grown.extend(other.lines.iter().map(|l| l.replace("\"rev-", "\"new-")));
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    split(set.source(), a.path(), &SplitConfig::default(), &Silent).unwrap();
    split(memory(grown), b.path(), &SplitConfig::default(), &Silent).unwrap();
    let before: HashMap<String, usize> = written(a.path()).into_iter().map(|r| (r.1, r.0)).collect();
    let after: HashMap<String, usize> = written(b.path()).into_iter().map(|r| (r.1, r.0)).collect();
    let moved = before
        .iter()
        .filter(|(id, p)| after.get(*id).is_some_and(|q| q != *p))
        .count();
    assert!(
        moved <= before.len() / 200,
        "{moved} of {} samples moved",
        before.len()
    );
}

/// A light near copy of a text: one word added in the middle (Jaccard well above 0.8).
fn near_copy(text: &str) -> String {
    let mut words: Vec<&str> = text.split(' ').collect();
    words.insert(words.len() / 2, "honestly");
    words.join(" ")
}

fn versioned(parent: &Path) -> SplitConfig {
    SplitConfig {
        parent: Some(parent.to_path_buf()),
        ..SplitConfig::default()
    }
}

#[test]
fn a_new_version_keeps_every_old_sample_in_place_and_its_near_copies_with_them() {
    let set = demo(1200, 4);
    let a = tempfile::tempdir().unwrap();
    let v1 = split(set.source(), a.path(), &SplitConfig::default(), &Silent)
        .unwrap()
        .manifest;
    let old = written(a.path());
    let labels: HashMap<String, String> = set
        .lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            (
                v["id"].as_str().unwrap().into(),
                v["label"].as_str().unwrap().into(),
            )
        })
        .collect();
    // Version 2: the old rows, new unrelated reviews, and a near copy (same label) of every old
    // holdout and val text and of a few train texts.
    // (The new reviews' planted one-word texts, "ok" with another label, would make conflicts.)
    let mut grown = set.lines.clone();
    let long = |l: &&String| {
        serde_json::from_str::<Value>(l).unwrap()["text"]
            .as_str()
            .unwrap()
            .split(' ')
            .count()
            >= 6
    };
    grown.extend(
        demo(300, 99)
            .lines
            .iter()
            .filter(long)
            .map(|l| l.replace("\"rev-", "\"new-")),
    );
    let mut copy_of = HashMap::new();
    for (k, (p, old_id, text)) in old.iter().enumerate().filter(|(k, r)| r.0 > 0 || k % 50 == 0) {
        if text.split(' ').count() < 6 {
            continue;
        }
        let id = format!("copy-{k:04}");
        let row = serde_json::json!({"id": id, "text": near_copy(text), "label": labels[old_id]});
        grown.push(row.to_string());
        copy_of.insert(id, *p);
    }
    let b = tempfile::tempdir().unwrap();
    let v2 = split(memory(grown), b.path(), &versioned(a.path()), &Silent)
        .unwrap()
        .manifest;
    assert!(v2.guard.passed);
    assert_eq!(v2.version, 2);
    let lineage = v2.parent.expect("the parent is recorded");
    assert_eq!(lineage.version, 1);
    assert_eq!(lineage.lost, [0, 0, 0], "no old sample is lost: {:?}", v2.dropped);
    let counts: Vec<u64> = v1.partitions.iter().map(|p| p.count).collect();
    assert_eq!(lineage.kept.to_vec(), counts);
    assert!(lineage.added.iter().sum::<u64>() > 300 && lineage.pulled > 0);
    let new = written(b.path());
    let part: HashMap<&str, usize> = new.iter().map(|r| (r.1.as_str(), r.0)).collect();
    for (p, id, _) in &old {
        assert_eq!(part.get(id.as_str()), Some(p), "old sample {id} moved");
    }
    for (id, p) in &copy_of {
        if let Some(q) = part.get(id.as_str()) {
            assert_eq!(
                q, p,
                "{id}, a near copy of a sample in partition {p}, landed in {q}"
            );
        }
    }
    let placed = copy_of.keys().filter(|id| part.contains_key(id.as_str())).count();
    assert!(
        placed * 10 >= copy_of.len() * 9,
        "{placed} of {} copies kept",
        copy_of.len()
    );
    // Every pair across partitions, brute force: no leak.
    let sh = Shingling::default();
    let norm: Vec<String> = new.iter().map(|r| normalize(&r.2)).collect();
    let sets: Vec<Vec<u64>> = norm.iter().map(|n| sh.shingles(n)).collect();
    for i in 0..new.len() {
        for j in i + 1..new.len() {
            let near = norm[i] == norm[j] || jaccard(&sets[i], &sets[j]) >= 0.85;
            assert!(
                !(near && new[i].0 != new[j].0),
                "{} ~ {} leak",
                new[i].1,
                new[j].1
            );
        }
    }
}

#[test]
fn a_version_whose_holdout_would_shrink_is_refused_unless_allowed() {
    let set = demo(600, 8);
    let a = tempfile::tempdir().unwrap();
    let v1 = split(set.source(), a.path(), &SplitConfig::default(), &Silent)
        .unwrap()
        .manifest;
    let gone: HashSet<String> = written(a.path())
        .into_iter()
        .filter(|r| r.0 == 2)
        .take(3)
        .map(|r| r.1)
        .collect();
    let kept: Vec<String> = set
        .lines
        .iter()
        .filter(|l| !gone.iter().any(|id| l.contains(&format!("\"{id}\""))))
        .cloned()
        .collect();
    let b = tempfile::tempdir().unwrap();
    let err = split(memory(kept.clone()), b.path(), &versioned(a.path()), &Silent).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("holds 3 fewer") && msg.contains("--allow-shrink"),
        "{msg}"
    );
    assert!(gone.iter().any(|id| msg.contains(id.as_str())), "{msg}");
    assert!(!b.path().join("manifest.json").exists(), "nothing written");
    let cfg = SplitConfig {
        allow_shrink: true,
        ..versioned(a.path())
    };
    let v2 = split(memory(kept), b.path(), &cfg, &Silent).unwrap().manifest;
    let lineage = v2.parent.unwrap();
    assert_eq!(lineage.lost, [0, 0, 3]);
    assert_eq!(v2.partitions[2].count, v1.partitions[2].count - 3);
}

/// The demo's rows as (id, text, label).
fn demo_rows(set: &DemoSet) -> Vec<(String, String, String)> {
    set.lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            let f = |k: &str| v[k].as_str().unwrap().to_string();
            (f("id"), f("text"), f("label"))
        })
        .collect()
}

fn row(id: &str, text: &str, label: &str) -> String {
    serde_json::json!({"id": id, "text": text, "label": label}).to_string()
}

#[test]
fn a_new_row_that_conflicts_with_a_locked_holdout_sample_is_the_one_dropped() {
    let set = demo(600, 12);
    let a = tempfile::tempdir().unwrap();
    let v1 = split(set.source(), a.path(), &SplitConfig::default(), &Silent)
        .unwrap()
        .manifest;
    let labels: HashMap<String, String> = demo_rows(&set).into_iter().map(|r| (r.0, r.2)).collect();
    let flip = |l: &str| if l == "positive" { "negative" } else { "positive" };
    // Near-copies (one word added) and an exact copy of holdout samples, each with the other label.
    let mut grown = set.lines.clone();
    let holdout: Vec<(usize, String, String)> = written(a.path())
        .into_iter()
        .filter(|r| r.0 == 2 && r.2.split(' ').count() >= 8)
        .take(6)
        .collect();
    let mut conflicting = Vec::new();
    for (k, (_, id, text)) in holdout.iter().enumerate() {
        let copy = if k == 0 { text.clone() } else { near_copy(text) };
        let new_id = format!("flip-{k}");
        grown.push(row(&new_id, &copy, flip(&labels[id])));
        conflicting.push(new_id);
    }
    let b = tempfile::tempdir().unwrap();
    let v2 = split(memory(grown), &b.path().join("v2"), &versioned(a.path()), &Silent)
        .expect("the version succeeds: the parent's holdout is kept, the new rows dropped")
        .manifest;
    let lineage = v2.parent.unwrap();
    assert_eq!(lineage.lost, [0, 0, 0]);
    assert_eq!(
        v2.partitions[2].content_hashes, v1.partitions[2].content_hashes,
        "the holdout is what it was"
    );
    assert_eq!(v2.dropped["locked"], 6, "{:?}", v2.dropped);
    let reported: Vec<&str> = v2.locked_conflicts.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(reported, conflicting);
    for c in &v2.locked_conflicts {
        assert_eq!(c.partition, "holdout");
        assert!(holdout.iter().any(|h| h.1 == c.parent_id), "{c:?}");
    }
    let ids: HashSet<String> = written(&b.path().join("v2")).into_iter().map(|r| r.1).collect();
    assert!(conflicting.iter().all(|id| !ids.contains(id)));
}

#[test]
fn parent_rows_keep_their_ids_when_their_texts_arrive_again() {
    let set = demo(500, 13);
    let a = tempfile::tempdir().unwrap();
    split(set.source(), a.path(), &SplitConfig::default(), &Silent).unwrap();
    let old = written(a.path());
    let labels: HashMap<String, String> = demo_rows(&set).into_iter().map(|r| (r.0, r.2)).collect();
    // The same texts again under new ids that sort before the parent's ("aaa-" < "rev-").
    let mut grown = set.lines.clone();
    for (k, (_, id, text)) in old.iter().enumerate().filter(|(k, _)| k % 5 == 0) {
        grown.push(row(&format!("aaa-{k:05}"), text, &labels[id]));
    }
    let b = tempfile::tempdir().unwrap();
    let v2 = split(memory(grown), &b.path().join("v2"), &versioned(a.path()), &Silent)
        .unwrap()
        .manifest;
    let new: HashMap<String, usize> = written(&b.path().join("v2"))
        .into_iter()
        .map(|r| (r.1, r.0))
        .collect();
    for (p, id, _) in &old {
        assert_eq!(
            new.get(id),
            Some(p),
            "parent row {id} kept, with its id, where it was"
        );
    }
    assert!(
        new.keys().all(|id| !id.starts_with("aaa-")),
        "the copies are the ones dropped"
    );
    assert_eq!(v2.parent.unwrap().lost, [0, 0, 0]);
}

#[test]
fn a_parent_that_does_not_match_its_files_or_parameters_is_refused() {
    let set = demo(400, 2);
    let a = tempfile::tempdir().unwrap();
    split(set.source(), a.path(), &SplitConfig::default(), &Silent).unwrap();
    let b = tempfile::tempdir().unwrap();
    let other_seed = SplitConfig {
        seed: 7,
        ..versioned(a.path())
    };
    let msg = split(set.source(), b.path(), &other_seed, &Silent)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("seed 42") && msg.contains("manifest.json"), "{msg}");
    // A partition edited after the split.
    let val = a.path().join("val.jsonl");
    let mut text = std::fs::read_to_string(&val).unwrap();
    text.push_str("{\"id\":\"x\",\"text\":\"an added row\",\"label\":\"pos\"}\n");
    std::fs::write(&val, text).unwrap();
    let msg = split(set.source(), b.path(), &versioned(a.path()), &Silent)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("val.jsonl") && msg.contains("changed after the split"),
        "{msg}"
    );
    assert_eq!(std::fs::read_dir(b.path()).unwrap().count(), 0, "nothing written");
}

fn write_csv(path: &Path, set: &DemoSet) {
    let mut w = csv::Writer::from_path(path).unwrap();
    w.write_record(["review_id", "body", "sentiment"]).unwrap();
    for l in &set.lines {
        let v: Value = serde_json::from_str(l).unwrap();
        w.write_record([
            v["id"].as_str().unwrap(),
            v["text"].as_str().unwrap(),
            v["label"].as_str().unwrap(),
        ])
        .unwrap();
    }
    w.flush().unwrap();
}

fn write_parquet(path: &Path, set: &DemoSet) {
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    let vals: Vec<Value> = set
        .lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let col = |k: &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(
            vals.iter().map(|v| v[k].as_str().unwrap().to_string()),
        ))
    };
    let label: ArrayRef = Arc::new(Int64Array::from_iter_values(
        vals.iter().map(|v| i64::from(v["label"] == "positive")),
    ));
    let batch =
        RecordBatch::try_from_iter([("id", col("id")), ("text", col("text")), ("label", label)]).unwrap();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), None)
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

#[test]
fn csv_and_parquet_are_split_in_their_own_format() {
    let set = demo(500, 12);
    let dir = tempfile::tempdir().unwrap();
    let jsonl = tempfile::tempdir().unwrap();
    let reference = split(set.source(), jsonl.path(), &SplitConfig::default(), &Silent)
        .unwrap()
        .manifest;
    let counts = |m: &contrai_data::split::Manifest| m.partitions.iter().map(|p| p.count).collect::<Vec<_>>();

    let csv_in = dir.path().join("reviews.csv");
    write_csv(&csv_in, &set);
    let mut cfg = SplitConfig::default();
    cfg.audit.fields = FieldSpec {
        text: "body".into(),
        label: Some("sentiment".into()),
        id: Some("review_id".into()),
        explicit: true,
    };
    let out = dir.path().join("csv-split");
    let m = split(Source::file(&csv_in, None).unwrap(), &out, &cfg, &Silent)
        .unwrap()
        .manifest;
    assert_eq!(m.format, Format::Csv);
    assert_eq!(counts(&m), counts(&reference), "same clusters, same placement");
    let mut r = csv::Reader::from_path(out.join("train.csv")).unwrap();
    assert_eq!(r.headers().unwrap(), vec!["review_id", "body", "sentiment"]);
    assert_eq!(r.records().count() as u64, m.partitions[0].count);

    let pq_in = dir.path().join("reviews.parquet");
    write_parquet(&pq_in, &set);
    let out = dir.path().join("pq-split");
    let m = split(
        Source::file(&pq_in, None).unwrap(),
        &out,
        &SplitConfig::default(),
        &Silent,
    )
    .unwrap()
    .manifest;
    assert_eq!(m.format, Format::Parquet);
    let file = std::fs::File::open(out.join("val.parquet")).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    assert_eq!(
        reader.schema().field(2).data_type(),
        &arrow_schema::DataType::Int64,
        "schema kept"
    );
    let n: usize = reader.build().unwrap().map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(n as u64, m.partitions[1].count);
    // Integer labels that flip inside a cluster are still conflicts.
    assert!(m.dropped["conflict"] > 0);
}

#[test]
fn bad_ratios_are_refused_before_any_work() {
    let cfg = SplitConfig {
        ratios: [0.8, 0.3, 0.05],
        ..SplitConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let err = split(demo(50, 1).source(), dir.path(), &cfg, &Silent)
        .unwrap_err()
        .to_string();
    assert!(err.contains("sum to 1"), "{err}");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing written"
    );
}
