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

#[test]
fn the_holdout_stays_locked_when_the_data_grows() {
    let set = demo(1200, 4);
    let a = tempfile::tempdir().unwrap();
    split(set.source(), a.path(), &SplitConfig::default(), &Silent).unwrap();
    let old = written(a.path());
    let holdout: Vec<&(usize, String, String)> = old.iter().filter(|r| r.0 == 2).collect();
    assert!(holdout.len() > 20);
    // Grow: new unrelated reviews, plus a light near copy of every old holdout text (same label).
    let labels: HashMap<String, String> = set
        .lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            (
                v["id"].as_str().unwrap().to_string(),
                v["label"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut grown = set.lines.clone();
    grown.extend(demo(300, 99).lines.iter().map(|l| l.replace("\"rev-", "\"new-")));
    let mut copies = HashSet::new();
    for (k, (_, old_id, text)) in holdout.iter().enumerate() {
        let mut words: Vec<&str> = text.split(' ').collect();
        let mid = words.len() / 2;
        words.insert(mid, "honestly");
        let id = format!("copy-{k:04}");
        grown.push(
            serde_json::json!({"id": id, "text": words.join(" "), "label": labels[old_id]}).to_string(),
        );
        copies.insert(id);
    }
    // A different seed would scatter clusters anew; the lock must still hold.
    let cfg = SplitConfig {
        seed: 1234,
        previous: Some(a.path().join("manifest.json")),
        ..SplitConfig::default()
    };
    let b = tempfile::tempdir().unwrap();
    let m = split(memory(grown), b.path(), &cfg, &Silent).unwrap().manifest;
    let lock = m.holdout_lock.expect("lock recorded");
    assert_eq!(lock.locked as usize, holdout.len());
    let new = written(b.path());
    let new_holdout: HashSet<&str> = new.iter().filter(|r| r.0 == 2).map(|r| r.1.as_str()).collect();
    for (_, id, _) in &holdout {
        assert!(
            new_holdout.contains(id.as_str()),
            "old holdout {id} left the holdout"
        );
    }
    for r in new.iter().filter(|r| copies.contains(&r.1)) {
        assert_eq!(r.0, 2, "{} (near copy of a holdout text) landed in {}", r.1, r.0);
    }
}

#[test]
fn the_lock_keeps_new_near_copies_out_even_when_old_rows_are_gone() {
    let set = demo(600, 8);
    let a = tempfile::tempdir().unwrap();
    split(set.source(), a.path(), &SplitConfig::default(), &Silent).unwrap();
    let holdout: Vec<(usize, String, String)> = written(a.path()).into_iter().filter(|r| r.0 == 2).collect();
    // The new data holds only edited copies of the old holdout texts, none of the originals.
    let lines: Vec<String> = holdout
        .iter()
        .enumerate()
        .map(|(k, (_, _, t))| {
            serde_json::json!({"id": format!("c{k}"), "text": format!("{t} indeed"), "label": "x"})
                .to_string()
        })
        .collect();
    let cfg = SplitConfig {
        previous: Some(a.path().join("manifest.json")),
        ..SplitConfig::default()
    };
    let b = tempfile::tempdir().unwrap();
    split(memory(lines), b.path(), &cfg, &Silent).unwrap();
    let new = written(b.path());
    assert_eq!(
        new.len(),
        holdout.iter().filter(|r| r.2.split(' ').count() >= 3).count()
    );
    assert!(
        new.iter().all(|r| r.0 == 2),
        "a near copy of a locked holdout text left the holdout"
    );
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
