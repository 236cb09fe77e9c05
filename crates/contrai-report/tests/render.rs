//! Reports render for every eval log and for a run directory, as well-formed, offline HTML.

use std::path::{Path, PathBuf};

fn check_offline_and_well_formed(html: &str) -> usize {
    assert!(html.starts_with("<!DOCTYPE html>"));
    // The SVG namespace is an identifier, not a fetch; anything else with a scheme would be.
    let stripped = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for bad in ["<script", "<link", "@import", "url(", "src=", "https:", "http:"] {
        assert!(!stripped.contains(bad), "the report references `{bad}`");
    }
    let mut svgs = 0;
    let mut rest = html;
    while let Some(start) = rest.find("<svg") {
        let end = rest[start..].find("</svg>").expect("closed svg") + start + 6;
        let doc = roxmltree::Document::parse(&rest[start..end]).expect("well-formed SVG");
        assert!(
            doc.root_element()
                .descendants()
                .any(|n| n.has_tag_name("path") || n.has_tag_name("circle"))
        );
        svgs += 1;
        rest = &rest[end..];
    }
    svgs
}

#[test]
fn every_eval_case_renders() {
    let cases = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/eval/doctor/cases");
    let Ok(entries) = std::fs::read_dir(&cases) else {
        eprintln!(
            "skipped: {} is absent (it ships only with ../shared)",
            cases.display()
        );
        return;
    };
    let mut n = 0;
    for e in entries {
        let dir = e.unwrap().path();
        let html =
            contrai_report::render(&dir, None).unwrap_or_else(|err| panic!("{}: {err}", dir.display()));
        let svgs = check_offline_and_well_formed(&html);
        assert!(svgs >= 1, "{}: no chart", dir.display());
        assert!(html.contains("Findings"));
        n += 1;
    }
    assert_eq!(n, 12);
}

fn write(dir: &Path, name: &str, lines: &[String]) {
    std::fs::write(dir.join(name), lines.join("\n") + "\n").unwrap();
}

#[test]
fn a_run_directory_shows_phases_decisions_and_every_plot() {
    let dir = tempfile_dir();
    let mut metrics = Vec::new();
    for step in 1..=400u64 {
        let phase = if step <= 300 { "main" } else { "contract" };
        let batch = if step <= 300 { 32 } else { 16 };
        let loss = 2.0 * (-(step as f64) / 40.0).exp() + 0.005;
        let lr = 5e-4 * (1.0 - step as f64 / 400.0);
        metrics.push(format!(
            r#"{{"step":{step},"phase":"{phase}","samples":{},"train_loss":{loss},"lr":{lr},"grad_norm":{},"batch_size":{batch},"wall_s":{}}}"#,
            step * 32,
            1.0 + 0.1 * (step % 7) as f64,
            step as f64 * 0.2
        ));
        if step > 300 && step % 10 == 0 {
            let s = 0.1 + 0.4 * (step - 300) as f64 / 100.0;
            metrics.push(format!(
                r#"{{"step":{step},"phase":"contract","sparsity":{s},"sparsity/blocks.0.ffn":{s}}}"#
            ));
        }
        if step % 50 == 0 {
            metrics.push(format!(
                r#"{{"step":{step},"phase":"{phase}","val_loss":{},"val_accuracy":{}}}"#,
                loss + 0.1,
                0.9 + step as f64 / 10_000.0
            ));
        }
    }
    write(dir.path(), "metrics.jsonl", &metrics);
    write(dir.path(), "decisions.jsonl", &[r#"{"step":300,"kind":"enter_contract","reason":"val loss stable < 2 % for 2 checkpoints","evidence":{"delta":0.01}}"#.to_string()]);
    let html = contrai_report::render(dir.path(), None).unwrap();
    assert_eq!(
        check_offline_and_well_formed(&html),
        6,
        "loss, accuracy, lr, grad norm, batch size, sparsity"
    );
    assert!(html.contains("Batch size") && html.contains("sparsity/blocks.0.ffn"));
    assert!(html.contains(r#"class="band-label""#) && html.contains(">main<") && html.contains(">contract<"));
    assert!(html.contains("enter_contract") && html.contains("Controller decisions"));
    assert!(html.contains("(log scale)"), "the loss spans decades");
}

#[test]
fn a_loss_jump_right_after_a_rollback_is_explained_not_flagged() {
    let dir = tempfile_dir();
    let mut metrics = Vec::new();
    for step in 1..=300u64 {
        // A smooth low loss, then the weights go back at step 250: the loss jumps 20x.
        let loss = if step == 251 {
            0.2
        } else {
            0.01 * (1.0 + 0.01 * (step % 3) as f64)
        };
        metrics.push(format!(
            r#"{{"step":{step},"phase":"contract","train_loss":{loss},"lr":1e-4,"grad_norm":1.0}}"#
        ));
    }
    write(dir.path(), "metrics.jsonl", &metrics);
    let rollback = r#"{"step":250,"kind":"rollback_contract","reason":"worse","evidence":{}}"#;
    write(dir.path(), "decisions.jsonl", &[rollback.to_string()]);
    let html = contrai_report::render(dir.path(), None).unwrap();
    assert!(
        html.contains("loss_spike at step 251 follows rollback_contract at step 250"),
        "explained"
    );
    assert!(!html.contains("<td>loss_spike</td>"), "not among the findings");
    // The same jump with no rollback before it is a spike.
    write(dir.path(), "decisions.jsonl", &[]);
    let html = contrai_report::render(dir.path(), None).unwrap();
    assert!(html.contains("<td>loss_spike</td>") && html.contains("action needed"));
}

#[test]
fn a_broken_decisions_file_names_file_and_line() {
    let dir = tempfile_dir();
    write(
        dir.path(),
        "metrics.jsonl",
        &[
            r#"{"step":1,"train_loss":1.0}"#.into(),
            r#"{"step":2,"train_loss":0.9}"#.into(),
        ],
    );
    write(
        dir.path(),
        "decisions.jsonl",
        &[r#"{"step":1,"kind":"x"}"#.into(), "{oops".into()],
    );
    let err = contrai_report::render(dir.path(), None).unwrap_err().to_string();
    assert!(err.contains("decisions.jsonl:2: invalid JSON"), "{err}");
}

fn tempfile_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}
