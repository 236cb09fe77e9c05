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

    // `contrai predict`: the student on the holdout file, written to --out, the summary on stdout.
    let hold = run.join("data/holdout.jsonl");
    let preds = dir.path().join("preds.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_contrai"))
        .args(["predict", run.to_str().unwrap(), hold.to_str().unwrap()])
        .args(["--variant", "student", "--json", "--out", preds.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("final/model-card.json")).unwrap()).unwrap();
    let recorded = card["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "student")
        .unwrap();
    let (got, want) = (
        summary["accuracy"].as_f64().unwrap(),
        recorded["holdout_accuracy"].as_f64().unwrap(),
    );
    assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    let lines = std::fs::read_to_string(&preds).unwrap();
    assert_eq!(lines.lines().count() as u64, summary["samples"].as_u64().unwrap());
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert!(
        first["id"].is_string() && first["label"].is_string() && first["probabilities"].is_object(),
        "{first}"
    );
    // A variant that does not exist is refused with the values there are.
    let out = Command::new(env!("CARGO_BIN_EXE_contrai"))
        .args([
            "predict",
            run.to_str().unwrap(),
            hold.to_str().unwrap(),
            "--variant",
            "fp16",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("f32") && err.contains("int8"),
        "{err}"
    );
}

/// Waits up to a minute for `cond`.
fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(t0.elapsed().as_secs() < 60, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_second_process_on_a_training_run_is_refused_and_sigterm_stops_it_with_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("long.toml");
    // Far more steps than the test lets it run.
    std::fs::write(
        &recipe,
        "[run]\nname = \"long\"\nphases = [\"main\"]\neval_every = 50\ncheckpoint_every = 50\n\n[model]\nvocab = 256\nseq_len = 16\nd_model = 16\nheads = 2\nffn = 32\n\n[main]\nsteps = 1000000\nbatch = 8\n",
    )
    .unwrap();
    let (recipe, out) = (recipe.to_str().unwrap(), dir.path().to_str().unwrap());
    let mut first = Command::new(env!("CARGO_BIN_EXE_contrai"))
        .args(["train", recipe, "--out", out])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let run = dir.path().join("long");
    let pid = first.id();
    wait_for("the first process to train", || {
        std::fs::read_to_string(run.join("metrics.jsonl")).is_ok_and(|m| m.matches("train_loss").count() >= 3)
    });

    for args in [
        vec!["train", recipe, "--out", out, "--resume"],
        vec!["compress", run.to_str().unwrap()],
    ] {
        let second = Command::new(env!("CARGO_BIN_EXE_contrai"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&second.stderr);
        assert_eq!(second.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("in use by process {pid}")) && err.contains("contrai train"),
            "{args:?}: {err}"
        );
    }

    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = first.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(first.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        err.contains("stopped by SIGTERM after step") && err.contains("--resume"),
        "{err}"
    );
    // The step it stopped at is the last one logged, and its checkpoint is there.
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let last: serde_json::Value =
        serde_json::from_str(metrics.lines().rev().find(|l| l.contains("train_loss")).unwrap()).unwrap();
    let step = last["step"].as_u64().unwrap();
    let names = [format!("stop-{step:08}"), format!("step-{step:08}")];
    assert!(
        names
            .iter()
            .any(|n| run.join("checkpoints").join(n).join("SHA256SUMS").is_file()),
        "no checkpoint of step {step}: {err}"
    );
}
