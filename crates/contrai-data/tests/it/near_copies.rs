//! Near-copies of real text at every length: windows of the SpamAssassin e-mails (8 to 400 words)
//! with one word, or 5 % of the words, replaced, inserted or deleted, must share a cluster and a
//! partition; and among distinct real sentences, every pair the audit joins must be a near-copy
//! by the definition, checked by brute force (`common::Reference`).

use crate::common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use common::Reference;
use contrai_data::split::{SplitConfig, split};
use contrai_data::text::normalize;
use contrai_data::{Audit, AuditConfig, Silent, Source};
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The length bands: words of the original text.
const BANDS: [(usize, usize); 5] = [(8, 15), (15, 30), (30, 60), (60, 120), (120, 400)];
/// Originals a band.
const PER_BAND: usize = 100;

fn corpus() -> Option<PathBuf> {
    contrai_testkit::shared("data/spamassassin.jsonl")
}

/// Each e-mail's normalised words, in file order.
fn mails(path: &PathBuf) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            normalize(v["text"].as_str().unwrap_or_default())
                .split_whitespace()
                .map(str::to_string)
                .collect()
        })
        .collect()
}

/// How an edited copy differs from its original.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Edits {
    /// One word replaced (half the time by the same word with a prefix), inserted or deleted.
    One,
    /// `max(1, ⌊5 % of the words⌋)` such edits, at different places.
    FivePercent,
}

/// `words` with `n` edits at distinct places; replacement and inserted words come from `vocab`.
fn edited(words: &[String], n: usize, vocab: &[String], rng: &mut ChaCha8Rng) -> Vec<String> {
    let mut places: Vec<usize> = (0..words.len()).collect();
    places.shuffle(rng);
    let chosen: HashSet<usize> = places.into_iter().take(n).collect();
    let mut out = Vec::with_capacity(words.len() + n);
    for (i, w) in words.iter().enumerate() {
        if !chosen.contains(&i) {
            out.push(w.clone());
            continue;
        }
        let fresh = loop {
            let v = vocab.choose(rng).unwrap();
            if v != w {
                break v.clone();
            }
        };
        match rng.random_range(0..4) {
            0 => out.push(format!("un{w}")),
            1 => out.push(fresh),
            2 => {
                out.push(fresh);
                out.push(w.clone());
            }
            _ => {}
        }
    }
    out
}

/// The planted texts: (band, edits, original's row, copy's row), and every row's text.
struct Planted {
    rows: Vec<String>,
    pairs: Vec<(usize, Edits, usize, usize)>,
}

fn plant(mails: &[Vec<String>]) -> Planted {
    let mut rng = ChaCha8Rng::seed_from_u64(48);
    let vocab: Vec<String> = mails
        .iter()
        .take(400)
        .flatten()
        .filter(|w| w.len() > 2 && w.chars().all(char::is_alphabetic))
        .cloned()
        .collect();
    let mut order: Vec<usize> = (0..mails.len()).collect();
    order.shuffle(&mut rng);
    let mut next = order.into_iter();
    let mut planted = Planted {
        rows: Vec::new(),
        pairs: Vec::new(),
    };
    for (band, &(lo, hi)) in BANDS.iter().enumerate() {
        let mut made = 0;
        while made < PER_BAND {
            let mail = &mails[next.next().expect("enough e-mails")];
            let len = rng.random_range(lo..hi);
            if mail.len() < len + 20 {
                continue;
            }
            let start = rng.random_range(0..mail.len() - len);
            let original = &mail[start..start + len];
            for kind in [Edits::One, Edits::FivePercent] {
                let n = match kind {
                    Edits::One => 1,
                    Edits::FivePercent => (len / 20).max(1),
                };
                let copy = edited(original, n, &vocab, &mut rng);
                planted.rows.push(original.join(" "));
                planted.rows.push(copy.join(" "));
                let at = planted.rows.len();
                planted.pairs.push((band, kind, at - 2, at - 1));
            }
            made += 1;
        }
    }
    planted
}

fn source(rows: &[String]) -> Source {
    let lines = rows
        .iter()
        .enumerate()
        .map(|(i, t)| serde_json::json!({"id": format!("r{i:05}"), "text": t, "label": "x"}).to_string())
        .collect();
    Source::Memory {
        name: "<planted>".into(),
        lines: Arc::new(lines),
    }
}

#[test]
fn one_word_and_five_percent_edits_are_found_at_every_length_and_never_split() {
    let Some(path) = corpus() else { return };
    let planted = plant(&mails(&path));
    let reference = Reference::default();
    let audit = Audit::run(vec![source(&planted.rows)], AuditConfig::default(), &Silent).unwrap();
    let cluster = &audit.clustering.cluster_of;
    for (band, &(lo, hi)) in BANDS.iter().enumerate() {
        for kind in [Edits::One, Edits::FivePercent] {
            let pairs: Vec<_> = planted
                .pairs
                .iter()
                .filter(|p| p.0 == band && p.1 == kind)
                .collect();
            let found = pairs.iter().filter(|p| cluster[p.2] == cluster[p.3]).count();
            let recall = found as f64 / pairs.len() as f64;
            eprintln!("{lo}-{hi} words, {kind:?}: {found}/{} ({recall:.3})", pairs.len());
            for p in pairs.iter().filter(|p| cluster[p.2] != cluster[p.3]).take(3) {
                let (a, b) = (
                    reference.text(&planted.rows[p.2]),
                    reference.text(&planted.rows[p.3]),
                );
                eprintln!(
                    "  missed ({} by the definition): {:?}\n  ~ {:?}",
                    reference.near(&a, &b),
                    a.norm,
                    b.norm
                );
            }
            assert!(recall >= 0.99, "{lo}-{hi} words, {kind:?}: recall {recall:.3}");
        }
    }
    // Every planted copy is a near-copy by the definition, and every pair the audit verified is.
    for p in &planted.pairs {
        let (a, b) = (
            reference.text(&planted.rows[p.2]),
            reference.text(&planted.rows[p.3]),
        );
        assert!(reference.near(&a, &b), "planted {p:?}");
    }
    let texts: Vec<_> = planted.rows.iter().map(|r| reference.text(r)).collect();
    for &(a, b, _) in &audit.clustering.verified_pairs {
        assert!(
            reference.near(&texts[a as usize], &texts[b as usize]),
            "verified {a} ~ {b}"
        );
    }
    // A split keeps every planted pair in one partition, and its guard passes.
    let out = tempfile::tempdir().unwrap();
    let m = split(
        source(&planted.rows),
        &out.path().join("split"),
        &SplitConfig::default(),
        &Silent,
    )
    .unwrap()
    .manifest;
    assert!(m.guard.passed);
    let partition_of = |row: usize| -> usize {
        let h =
            contrai_data::text::hash_hex(contrai_data::text::content_hash(&normalize(&planted.rows[row])));
        m.partitions
            .iter()
            .position(|p| p.content_hashes.contains(&h))
            .unwrap_or(usize::MAX)
    };
    let split_apart = planted
        .pairs
        .iter()
        .filter(|p| {
            let (a, b) = (partition_of(p.2), partition_of(p.3));
            a != usize::MAX && b != usize::MAX && a != b
        })
        .count();
    assert_eq!(split_apart, 0, "planted pairs in two partitions");
}

#[test]
fn in_a_version_one_word_copies_of_short_texts_follow_their_originals() {
    let Some(path) = corpus() else { return };
    let planted = plant(&mails(&path));
    // Version 1: the originals of 15 to 60 words (one row each). Version 2: they and their copies.
    let pairs: Vec<_> = planted.pairs.iter().filter(|p| p.0 == 1 || p.0 == 2).collect();
    let originals: Vec<String> = pairs
        .iter()
        .step_by(2)
        .map(|p| planted.rows[p.2].clone())
        .collect();
    let mut grown = originals.clone();
    grown.extend(pairs.iter().step_by(2).map(|p| planted.rows[p.3].clone()));
    let dir = tempfile::tempdir().unwrap();
    let v1 = split(
        source(&originals),
        &dir.path().join("v1"),
        &SplitConfig::default(),
        &Silent,
    )
    .unwrap()
    .manifest;
    let cfg = SplitConfig {
        parent: Some(dir.path().join("v1")),
        ..SplitConfig::default()
    };
    let v2 = split(source(&grown), &dir.path().join("v2"), &cfg, &Silent)
        .unwrap()
        .manifest;
    let where_in = |m: &contrai_data::split::Manifest, text: &str| {
        let h = contrai_data::text::hash_hex(contrai_data::text::content_hash(&normalize(text)));
        m.partitions.iter().position(|p| p.content_hashes.contains(&h))
    };
    let n = originals.len();
    let held = (0..n)
        .filter(|&i| where_in(&v1, &originals[i]) == Some(2))
        .count();
    assert!(held > 5, "{held} originals in the holdout");
    for i in 0..n {
        let (was, copy) = (where_in(&v1, &originals[i]), where_in(&v2, &grown[n + i]));
        assert_eq!(where_in(&v2, &originals[i]), was, "an original moved");
        assert!(
            copy.is_none() || copy == was,
            "copy {i} in {copy:?}, its original in {was:?}"
        );
    }
}

#[test]
fn the_banded_edit_distance_agrees_with_the_full_one() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..3000 {
        let n = rng.random_range(0..30);
        let a: Vec<u64> = (0..n).map(|_| rng.random_range(0..6)).collect();
        let mut b = a.clone();
        for _ in 0..rng.random_range(0..5) {
            let at = rng.random_range(0..=b.len());
            match rng.random_range(0..3) {
                0 if at < b.len() => b[at] = rng.random_range(0..6),
                1 => b.insert(at, rng.random_range(0..6)),
                _ if at < b.len() => {
                    b.remove(at);
                }
                _ => {}
            }
        }
        let full = common::levenshtein(&a, &b);
        for k in 1..6 {
            let want = (full <= k).then_some(full);
            assert_eq!(
                contrai_data::near::word_edits_within(&a, &b, k),
                want,
                "{a:?} {b:?} k={k}"
            );
        }
    }
}

/// Sentences of 8 to 40 words from the e-mails, each text once.
fn sentences(mails: &[Vec<String>], limit: usize) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for mail in mails {
        let text = mail.join(" ");
        for s in text.split(['.', '!', '?']) {
            let words = s.split_whitespace().count();
            if (8..=40).contains(&words) && seen.insert(s.trim().to_string()) {
                out.push(s.trim().to_string());
                if out.len() == limit {
                    return out;
                }
            }
        }
    }
    out
}

#[test]
fn among_distinct_real_sentences_every_joined_pair_is_a_near_copy() {
    let Some(path) = corpus() else { return };
    let rows = sentences(&mails(&path), 3000);
    assert_eq!(rows.len(), 3000);
    let reference = Reference::default();
    let texts: Vec<_> = rows.iter().map(|r| reference.text(r)).collect();
    let audit = Audit::run(vec![source(&rows)], AuditConfig::default(), &Silent).unwrap();
    let verified = &audit.clustering.verified_pairs;
    let good = verified
        .iter()
        .filter(|&&(a, b, _)| reference.near(&texts[a as usize], &texts[b as usize]))
        .count();
    let precision = good as f64 / verified.len().max(1) as f64;
    // The corpus's own near-copies (quoted replies, list footers), found by brute force.
    let truth = reference.pairs(&texts);
    let cluster = &audit.clustering.cluster_of;
    let found = truth.iter().filter(|&&(a, b)| cluster[a] == cluster[b]).count();
    let recall = found as f64 / truth.len().max(1) as f64;
    eprintln!(
        "{} sentences: {} pairs joined, precision {precision:.4}; {} pairs by brute force, recall {recall:.4}",
        rows.len(),
        verified.len(),
        truth.len()
    );
    for &(a, b) in truth.iter().filter(|&&(a, b)| cluster[a] != cluster[b]) {
        eprintln!("  missed: {:?}\n  ~ {:?}", texts[a].norm, texts[b].norm);
    }
    assert!(precision >= 0.99, "precision {precision:.4}");
    assert!(recall >= 0.99, "recall {recall:.4} of {} pairs", truth.len());
}
