//! Reports render for every eval log and for a run directory, as well-formed, offline HTML.

use std::path::Path;

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
    let Some(cases) = contrai_testkit::shared("eval/doctor/cases") else {
        return;
    };
    let entries = std::fs::read_dir(&cases).unwrap();
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

/// Writes `lines` as `dir/name`, in a directory marked as a Contrai run (`run.json`).
fn write(dir: &Path, name: &str, lines: &[String]) {
    std::fs::write(dir.join("run.json"), r#"{"format": 1, "writer": "test"}"#).unwrap();
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
    write(dir.path(), "decisions.jsonl", &[r#"{"step":300,"phase":"contract","kind":"enter_contract","reason":"val loss stable < 2 % for 2 checkpoints","evidence":{"delta":0.01}}"#.to_string()]);
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
            r#"{{"step":{step},"phase":"contract","samples":{step},"train_loss":{loss},"lr":1e-4,"grad_norm":1.0,"batch_size":16,"wall_s":0.0}}"#
        ));
    }
    write(dir.path(), "metrics.jsonl", &metrics);
    let rollback =
        r#"{"step":250,"phase":"contract","kind":"rollback_contract","reason":"worse","evidence":{}}"#;
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
            r#"{"step":1,"phase":"main","samples":8,"train_loss":1.0,"lr":1e-3,"grad_norm":1.0,"batch_size":8,"wall_s":0.1}"#.into(),
            r#"{"step":2,"phase":"main","samples":16,"train_loss":0.9,"lr":1e-3,"grad_norm":1.0,"batch_size":8,"wall_s":0.2}"#.into(),
        ],
    );
    write(
        dir.path(),
        "decisions.jsonl",
        &[
            r#"{"step":1,"phase":"main","kind":"main_complete","reason":"done","evidence":{}}"#.into(),
            "{oops".into(),
        ],
    );
    let err = contrai_report::render(dir.path(), None).unwrap_err().to_string();
    assert!(err.contains("decisions.jsonl:2: invalid JSON"), "{err}");
}

fn tempfile_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn a_run_directory_of_another_format_version_is_refused_naming_the_version() {
    let dir = tempfile_dir();
    write(dir.path(), "decisions.jsonl", &[]);
    std::fs::write(
        dir.path().join("run.json"),
        r#"{"format": 99, "writer": "a later Contrai"}"#,
    )
    .unwrap();
    let err = contrai_report::render(dir.path(), None).unwrap_err().to_string();
    assert!(err.contains("run.json") && err.contains("format 99"), "{err}");
}
