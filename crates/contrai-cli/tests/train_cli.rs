//! `contrai train` end to end on a tiny recipe: the run directory, the holdout line, the report.

use std::process::Command;

#[test]
fn train_writes_a_run_directory_and_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("tiny.toml");
    std::fs::write(
        &recipe,
        "[run]\nname = \"tiny\"\neval_every = 5\ncheckpoint_every = 5\n\n[model]\nvocab = 256\nseq_len = 16\nd_model = 16\nheads = 2\nffn = 32\n\n[main]\nsteps = 20\nbatch = 8\n\n[contract]\nbatch = 4\n\n[refine.distill]\nsteps = 20\neval_every = 10\nd_model = 16\nffn = 32\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_contrai"))
        .args([
            "train",
            recipe.to_str().unwrap(),
            "--out",
            dir.path().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("holdout: accuracy"), "{stdout}");
    let run = dir.path().join("tiny");
    for f in [
        "recipe.toml",
        "plan.json",
        "metrics.jsonl",
        "final/eval.json",
        "data/manifest.json",
        "report.html",
    ] {
        assert!(run.join(f).is_file(), "{f} missing");
    }
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(
        html.contains("Holdout (evaluated once") && html.contains(">main<"),
        "phases and holdout drawn"
    );
    for part in [
        ">validate<",
        ">contract<",
        ">refine<",
        "Controller decisions",
        "enter_contract",
        "Batch size",
        "Sparsity",
        "Compression",
        ">int8<",
        ">student<",
        "final/student.safetensors",
    ] {
        assert!(html.contains(part), "{part} missing from the report");
    }
    assert!(run.join("decisions.jsonl").is_file() && run.join("final/model-card.json").is_file());
    let decisions = std::fs::read_to_string(run.join("decisions.jsonl")).unwrap();
    assert!(decisions.contains("\"kind\":\"distill\""), "{decisions}");
    let student = std::fs::read_to_string(run.join("final/student-metrics.jsonl")).unwrap();
    assert_eq!(student.lines().count(), 20, "one line a student step");
}
