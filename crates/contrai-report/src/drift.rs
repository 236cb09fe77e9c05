//! The drift report as a page: the verdict, the row changes, and each partition's label, length
//! and vocabulary shift, in the report's style.

use contrai_data::drift::{DriftReport, PartitionShift};

use crate::page::{Page, classed};

/// The page of a drift report.
pub fn page(r: &DriftReport) -> String {
    let mut p = Page::new("Data drift", &format!("{} → {}", r.old, r.new));
    p.verdict(&r.verdict, !r.drifted);
    for f in &r.findings {
        p.para(f);
    }
    p.heading("Rows");
    let rows = &r.rows;
    let example = |kind: &str| rows.examples.get(kind).map(|v| v.join(", ")).unwrap_or_default();
    p.table(
        &["", "samples", "examples"],
        &[
            vec!["old".into(), rows.old.to_string(), String::new()],
            vec!["new".into(), rows.new.to_string(), String::new()],
            vec!["added".into(), rows.added.to_string(), example("added")],
            vec!["removed".into(), rows.removed.to_string(), example("removed")],
            vec!["changed".into(), rows.changed.to_string(), example("changed")],
            vec!["unchanged".into(), rows.unchanged.to_string(), String::new()],
        ],
    );
    p.para(&format!(
        "Rows matched by {}. {} new samples are near-copies of old ones ({:.1} % of the new texts){}.",
        rows.matched_by,
        r.near_copies.count,
        100.0 * r.near_copies.share_of_new,
        if r.near_copies.examples.is_empty() {
            String::new()
        } else {
            format!(", e.g. {}", r.near_copies.examples.join("; "))
        }
    ));
    for part in &r.partitions {
        partition(&mut p, part);
    }
    p.finish("Data drift")
}

/// A cell marking a shift.
fn flag(shifted: bool) -> String {
    if shifted {
        classed("sev-warning", "shifted")
    } else {
        classed("sev-info", "no shift")
    }
}

fn partition(p: &mut Page, s: &PartitionShift) {
    p.heading(&format!(
        "{}: {} → {} samples",
        s.name, s.samples[0], s.samples[1]
    ));
    if let Some(l) = &s.labels {
        let total = |i: usize| l.counts.values().map(|c| c[i]).sum::<u64>().max(1) as f64;
        let rows: Vec<Vec<String>> = l
            .counts
            .iter()
            .map(|(k, c)| {
                vec![
                    k.clone(),
                    format!("{} ({:.1} %)", c[0], 100.0 * c[0] as f64 / total(0)),
                    format!("{} ({:.1} %)", c[1], 100.0 * c[1] as f64 / total(1)),
                ]
            })
            .collect();
        p.table(&["label", "old", "new"], &rows);
        p.table(
            &["labels", "chi-square", "p-value"],
            &[vec![
                flag(l.shifted),
                format!("{:.2} ({} dof)", l.chi_square, l.dof),
                format!("{:.2e}", l.p_value),
            ]],
        );
    }
    if let Some(l) = &s.length {
        p.table(
            &["lengths", "median words", "KS D", "p-value"],
            &[vec![
                flag(l.shifted),
                format!("{} → {}", l.median_words[0], l.median_words[1]),
                format!("{:.3}", l.ks_d),
                format!("{:.2e}", l.p_value),
            ]],
        );
    }
    if let Some(v) = &s.vocabulary {
        p.table(
            &["vocabulary", "JSD (bits)", "random halves", "ratio", "p-value"],
            &[vec![
                flag(v.shifted),
                format!("{:.4}", v.jsd),
                format!("{:.4}", v.null_jsd),
                format!("{:.1}", v.ratio),
                format!("{:.2}", v.p_value),
            ]],
        );
        let rows: Vec<Vec<String>> = v
            .moved
            .iter()
            .map(|g| {
                vec![
                    g.gram.clone(),
                    format!("{:.1}", g.old_per_10k),
                    format!("{:.1}", g.new_per_10k),
                ]
            })
            .collect();
        p.table(&["n-gram that moved most", "old per 10k", "new per 10k"], &rows);
    }
}
