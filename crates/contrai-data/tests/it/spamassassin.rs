//! The real SpamAssassin corpus from `../shared/data` (skipped with a message when absent, a
//! failure when `CONTRAI_REQUIRE_SHARED` is set).

use std::path::PathBuf;

use contrai_data::split::{SplitConfig, split};
use contrai_data::{Audit, AuditConfig, Silent, Source};

fn corpus() -> Option<PathBuf> {
    contrai_testkit::shared("data/spamassassin.jsonl")
}

#[test]
fn audit_finds_the_known_duplicates_and_more() {
    let Some(path) = corpus() else { return };
    let a = Audit::run(
        vec![Source::file(&path, None).unwrap()],
        AuditConfig::default(),
        &Silent,
    )
    .unwrap();
    let r = a.report();
    assert_eq!(r.samples, 6046);
    // The corpus's documented defect: 137 groups of byte-identical bodies covering 329 e-mails.
    assert_eq!(
        (r.exact.byte_identical_groups, r.exact.byte_identical_samples),
        (137, 329)
    );
    // Normalisation (case, width, spacing) joins more of them.
    assert!(r.exact.groups > 137 && r.exact.samples > 329, "{:?}", r.exact);
    // Forwarded and re-sent mail: clusters that join different texts.
    assert!(r.near.clusters > 100, "{:?}", r.near);
    assert_eq!(r.conflicts.clusters, 0, "no label conflicts among the duplicates");
    assert_eq!(r.empty.empty.len() + r.empty.near_empty.len(), 3);
    let classes: Vec<(String, u64)> = r.classes.iter().map(|c| (c.label.clone(), c.count)).collect();
    assert_eq!(
        classes,
        vec![("ham".to_string(), 4150), ("spam".to_string(), 1896)]
    );
}

#[test]
fn split_passes_its_guard_and_is_byte_identical_twice() {
    let Some(path) = corpus() else { return };
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let src = Source::file(&path, None).unwrap();
    let m = split(src.clone(), a.path(), &SplitConfig::default(), &Silent)
        .unwrap()
        .manifest;
    assert!(m.guard.passed);
    assert_eq!(
        (m.guard.shared_content_hashes, m.guard.cross_partition_near_pairs),
        (0, 0)
    );
    let total: u64 = m.partitions.iter().map(|p| p.count).sum();
    assert!(
        total > 5500 && m.partitions[2].count > 200,
        "{:?}",
        m.partitions.iter().map(|p| p.count).collect::<Vec<_>>()
    );
    split(src, b.path(), &SplitConfig::default(), &Silent).unwrap();
    for f in ["train.jsonl", "val.jsonl", "holdout.jsonl", "manifest.json"] {
        let (x, y) = (
            std::fs::read(a.path().join(f)).unwrap(),
            std::fs::read(b.path().join(f)).unwrap(),
        );
        assert!(x == y, "{f} differs between two runs");
    }
}
