//! The persisted index: a second audit of an unchanged file hashes nothing and finds the same
//! clusters; an appended file hashes only its new texts; a store elsewhere works the same.

use std::path::Path;

use contrai_data::demo::{DemoConfig, generate};
use contrai_data::store::StoreDir;
use contrai_data::{Audit, AuditConfig, Silent, Source};

fn audit(path: &Path, store: Option<StoreDir>) -> Audit {
    let cfg = AuditConfig {
        store,
        ..AuditConfig::default()
    };
    Audit::run(vec![Source::file(path, None).unwrap()], cfg, &Silent).unwrap()
}

fn clusters(a: &Audit) -> String {
    serde_json::to_string(&a.report().clusters).unwrap()
}

#[test]
fn an_unchanged_file_is_not_hashed_again_and_an_appended_one_only_for_its_new_rows() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("reviews.jsonl");
    let lines = generate(DemoConfig { base: 1500, seed: 9 }).lines;
    let (first, more) = lines.split_at(1200);
    std::fs::write(&data, first.join("\n") + "\n").unwrap();
    let plain = audit(&data, None);
    let built = audit(&data, Some(StoreDir::Beside));
    assert_eq!((built.index.reused, built.index.hashed), (0, 1200));
    assert!(dir.path().join(".contrai-index").is_dir(), "kept beside the data");
    let again = audit(&data, Some(StoreDir::Beside));
    assert_eq!(
        (again.index.reused, again.index.hashed),
        (1200, 0),
        "nothing hashed again"
    );
    assert_eq!(clusters(&again), clusters(&plain), "the same clusters");
    // Append: only the new texts (those not byte-identical to an old one) are hashed.
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();
    let old: std::collections::HashSet<&str> = first
        .iter()
        .map(|l| l.split("\"text\":").nth(1).unwrap_or(""))
        .collect();
    let new_texts = more
        .iter()
        .filter(|l| !old.contains(l.split("\"text\":").nth(1).unwrap_or("")))
        .count() as u64;
    let grown = audit(&data, Some(StoreDir::Beside));
    assert_eq!(grown.index.hashed, new_texts);
    assert_eq!(grown.index.reused, lines.len() as u64 - new_texts);
    assert_eq!(clusters(&grown), clusters(&audit(&data, None)));
    // A store in another folder.
    let elsewhere = dir.path().join("cache");
    audit(&data, Some(StoreDir::In(elsewhere.clone())));
    let reused = audit(&data, Some(StoreDir::In(elsewhere.clone())));
    assert_eq!(reused.index.hashed, 0);
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 1);
}
