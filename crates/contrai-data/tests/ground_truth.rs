//! Near-duplicate recall and precision, and label conflicts, against the demo set's ground truth
//! and brute-force all-pairs Jaccard.

use std::collections::{HashMap, HashSet};

use contrai_data::demo::{DemoConfig, DemoSet, generate};
use contrai_data::text::{Shingling, jaccard, normalize};
use contrai_data::{Audit, AuditConfig, IndexConfig, Silent};

fn demo() -> DemoSet {
    generate(DemoConfig { base: 2500, seed: 11 })
}

fn texts(set: &DemoSet) -> Vec<String> {
    set.lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// Every pair of distinct normalised texts with Jaccard ≥ `t`, by brute force.
fn brute_pairs(texts: &[String], t: f64) -> Vec<(usize, usize, f64)> {
    let sh = Shingling::default();
    let norm: Vec<String> = texts.iter().map(|t| normalize(t)).collect();
    let sets: Vec<Vec<u64>> = norm.iter().map(|n| sh.shingles(n)).collect();
    let mut out = Vec::new();
    for i in 0..sets.len() {
        for j in i + 1..sets.len() {
            if norm[i].is_empty() || norm[j].is_empty() || norm[i] == norm[j] {
                continue;
            }
            let s = jaccard(&sets[i], &sets[j]);
            if s >= t {
                out.push((i, j, s));
            }
        }
    }
    out
}

fn audit(set: &DemoSet, threshold: f64) -> Audit {
    audit_with(
        set,
        IndexConfig {
            threshold,
            ..IndexConfig::default()
        },
    )
}

fn audit_with(set: &DemoSet, index: IndexConfig) -> Audit {
    let cfg = AuditConfig {
        index,
        ..AuditConfig::default()
    };
    Audit::run(vec![set.source()], cfg, &Silent).unwrap()
}

/// Recall over brute-force pairs with J ≥ 0.85, and the share of reported pairs whose true
/// Jaccard reaches `precise_at`.
fn recall_precision(
    set: &DemoSet,
    texts: &[String],
    truth: &[(usize, usize, f64)],
    index: IndexConfig,
    precise_at: f64,
) -> (f64, f64) {
    let a = audit_with(set, index);
    let c = &a.clustering;
    let found = truth
        .iter()
        .filter(|(i, j, _)| c.cluster_of[*i] == c.cluster_of[*j])
        .count();
    let sh = Shingling::default();
    let verified = &c.verified_pairs;
    assert!(!verified.is_empty());
    let good = verified
        .iter()
        .filter(|&&(x, y, _)| {
            let sx = sh.shingles(&normalize(&texts[x as usize]));
            jaccard(&sx, &sh.shingles(&normalize(&texts[y as usize]))) >= precise_at
        })
        .count();
    (
        found as f64 / truth.len() as f64,
        good as f64 / verified.len() as f64,
    )
}

#[test]
fn near_duplicate_recall_and_precision_beat_the_targets() {
    let set = demo();
    let texts = texts(&set);
    let truth = brute_pairs(&texts, 0.85);
    assert!(
        truth.len() > 80,
        "the demo set plants enough near pairs ({})",
        truth.len()
    );
    // The default: threshold 0.8, 23 bands × 11 rows.
    let (recall, precision) = recall_precision(&set, &texts, &truth, IndexConfig::default(), 0.8);
    assert!(
        recall >= 0.95,
        "default config: recall {recall:.4} over {} pairs",
        truth.len()
    );
    assert!(precision >= 0.99, "default config: precision {precision:.4}");
    // Threshold 0.85 with a banding chosen for 0.95 recall there.
    let strict = IndexConfig {
        threshold: 0.85,
        recall_at_threshold: 0.95,
        ..IndexConfig::default()
    };
    let (recall, precision) = recall_precision(&set, &texts, &truth, strict, 0.85);
    assert!(recall >= 0.95, "threshold 0.85: recall {recall:.4}");
    assert!(precision >= 0.99, "threshold 0.85: precision {precision:.4}");
}

#[test]
fn planted_exact_copies_and_families_share_a_cluster() {
    let set = demo();
    let a = audit(&set, 0.8);
    let c = &a.clustering;
    for &(x, y) in &set.truth.exact_copies {
        assert_eq!(c.cluster_of[x], c.cluster_of[y], "exact copy {x} ~ {y}");
    }
    let report = a.report();
    assert!(report.exact.groups as usize >= set.truth.exact_copies.len() / 2);
    assert!(
        report.exact.byte_identical_groups < report.exact.groups,
        "re-cased copies are not byte-identical"
    );
    // A family member clearly similar to its original (J ≥ 0.85) must share its cluster.
    let texts = texts(&set);
    let sh = Shingling::default();
    let sets: Vec<Vec<u64>> = texts.iter().map(|t| sh.shingles(&normalize(t))).collect();
    let mut checked = 0;
    for f in &set.truth.families {
        for &m in &f[1..] {
            if jaccard(&sets[f[0]], &sets[m]) >= 0.85 {
                checked += 1;
                assert_eq!(
                    c.cluster_of[m], c.cluster_of[f[0]],
                    "family member {m} of {}",
                    f[0]
                );
            }
        }
    }
    assert!(
        checked >= set.truth.families.len() * 2,
        "{checked} family members checked"
    );
}

#[test]
fn every_planted_label_flip_is_a_reported_conflict() {
    let set = demo();
    assert!(!set.truth.conflicts.is_empty());
    let a = audit(&set, 0.8);
    let report = a.report();
    let ids: Vec<String> = set
        .lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let conflicted: HashSet<&str> = report
        .conflicts
        .list
        .iter()
        .flat_map(|c| c.ids.iter().map(String::as_str))
        .collect();
    for &(x, y) in &set.truth.conflicts {
        assert!(
            conflicted.contains(ids[x].as_str()) && conflicted.contains(ids[y].as_str()),
            "flip {x} ~ {y}"
        );
    }
    for c in &report.conflicts.list {
        assert!(c.labels.len() > 1 && c.majority_fraction < 1.0);
    }
}

#[test]
fn empty_texts_and_outliers_are_reported() {
    let set = demo();
    let report = audit(&set, 0.8).report();
    let flagged = report.empty.empty.len() + report.empty.near_empty.len();
    assert_eq!(flagged, set.truth.empty.len());
    let long: HashSet<String> = report.length.outliers.iter().map(|o| o.id.clone()).collect();
    let ids: HashMap<usize, String> = set
        .truth
        .outliers
        .iter()
        .map(|&i| (i, format!("rev-{:06}", i + 1)))
        .collect();
    for id in ids.values() {
        assert!(long.contains(id), "outlier {id} not reported");
    }
}

#[test]
fn verification_rereads_the_source_when_shingles_do_not_fit_in_memory() {
    let set = demo();
    let cached = audit(&set, 0.8);
    let streamed = audit_with(
        &set,
        IndexConfig {
            shingle_cache: 1000,
            ..IndexConfig::default()
        },
    );
    assert_eq!(cached.clustering.clusters, streamed.clustering.clusters);
    assert_eq!(
        cached.clustering.verified_pairs,
        streamed.clustering.verified_pairs
    );
}

#[test]
fn clusters_do_not_depend_on_input_order() {
    let set = demo();
    let mut reversed = set.clone();
    reversed.lines.reverse();
    let key = |a: &Audit| {
        let mut cl: Vec<Vec<String>> = a
            .clustering
            .clusters
            .iter()
            .filter(|m| m.len() > 1)
            .map(|m| {
                m.iter()
                    .map(|&i| a.index.samples[i as usize].id.clone())
                    .collect()
            })
            .collect();
        cl.sort();
        cl
    };
    assert_eq!(key(&audit(&set, 0.8)), key(&audit(&reversed, 0.8)));
}
