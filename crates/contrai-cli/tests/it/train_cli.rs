//! `contrai train` end to end on a tiny recipe: the run directory, the holdout line, the report.

use crate::util;

use util::{TempDir, contrai, read_json, read_to_string};

/// A tiny run of every phase, the student included.
const TINY: &str = "[run]\nname = \"tiny\"\neval_every = 5\ncheckpoint_every = 5\n\n[model]\nvocab = 256\nseq_len = 16\nd_model = 16\nheads = 2\nffn = 32\n\n[main]\nsteps = 20\nbatch = 8\n\n[contract]\nbatch = 4\n\n[refine.distill]\nsteps = 20\neval_every = 10\nd_model = 16\nffn = 32\n";

/// Far more steps than the test lets it run.
const LONG: &str = "[run]\nname = \"long\"\nphases = [\"main\"]\neval_every = 50\ncheckpoint_every = 50\n\n[model]\nvocab = 256\nseq_len = 16\nd_model = 16\nheads = 2\nffn = 32\n\n[main]\nsteps = 1000000\nbatch = 8\n";

#[test]
fn train_writes_a_run_directory_and_its_report() {
    let dir = TempDir::new();
    let recipe = dir.write("tiny.toml", TINY);
    contrai(["train"])
        .arg(&recipe)
        .arg("--out")
        .arg(dir.path())
        .output()
        .assert_success()
        .assert_stdout_contains(&["holdout: accuracy"]);
    let run = dir.join("tiny");
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
    let html = read_to_string(run.join("report.html"));
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
    let decisions = read_to_string(run.join("decisions.jsonl"));
    assert!(decisions.contains("\"kind\":\"distill\""), "{decisions}");
    let student = read_to_string(run.join("final/student-metrics.jsonl"));
    assert_eq!(student.lines().count(), 20, "one line a student step");

    // `contrai predict`: the student on the holdout file, written to --out, the summary on stdout.
    let hold = run.join("data/holdout.jsonl");
    let preds = dir.join("preds.jsonl");
    let out = contrai(["predict"])
        .args([&run, &hold])
        .args(["--variant", "student", "--json", "--out"])
        .arg(&preds)
        .output();
    let summary = out.assert_success().json();
    let card = read_json(run.join("final/model-card.json"));
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
    let lines = read_to_string(&preds);
    assert_eq!(lines.lines().count() as u64, summary["samples"].as_u64().unwrap());
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert!(
        first["id"].is_string() && first["label"].is_string() && first["probabilities"].is_object(),
        "{first}"
    );
    // A variant that does not exist is refused with the values there are.
    contrai(["predict"])
        .args([&run, &hold])
        .args(["--variant", "fp16"])
        .output()
        .assert_failure()
        .assert_stderr_contains(&["f32", "int8"]);
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
    let dir = TempDir::new();
    let recipe = dir.write("long.toml", LONG);
    let (recipe, out) = (recipe.to_str().unwrap(), dir.path().to_str().unwrap());
    let first = contrai(["train", recipe, "--out", out]).spawn();
    let run = dir.join("long");
    let pid = first.id();
    wait_for("the first process to train", || {
        std::fs::read_to_string(run.join("metrics.jsonl")).is_ok_and(|m| m.matches("train_loss").count() >= 3)
    });

    for args in [
        vec!["train", recipe, "--out", out, "--resume"],
        vec!["compress", run.to_str().unwrap()],
    ] {
        contrai(&args)
            .output()
            .assert_code(2)
            .assert_stderr_contains(&[&format!("in use by process {pid}"), "contrai train"]);
    }

    first.terminate();
    let stopped = first.wait();
    stopped
        .assert_code(143)
        .assert_stderr_contains(&["stopped by SIGTERM after step", "--resume"]);
    // The step it stopped at is the last one logged, and its checkpoint is there.
    let metrics = read_to_string(run.join("metrics.jsonl"));
    let last: serde_json::Value =
        serde_json::from_str(metrics.lines().rev().find(|l| l.contains("train_loss")).unwrap()).unwrap();
    let step = last["step"].as_u64().unwrap();
    let names = [format!("stop-{step:08}"), format!("step-{step:08}")];
    assert!(
        names
            .iter()
            .any(|n| run.join("checkpoints").join(n).join("SHA256SUMS").is_file()),
        "no checkpoint of step {step}\n{stopped}"
    );
}

/// Main alone, evaluated every 20 steps, in the precision given; its linear layers' products
/// (2,048 rows × 64 × 64 and more) large enough to run in bf16.
fn main_only(precision: &str) -> String {
    format!(
        "[run]\nname = \"{precision}\"\nphases = [\"main\"]\neval_every = 20\ncheckpoint_every = 20\n\n\
         [model]\nvocab = 512\nseq_len = 64\nd_model = 64\nheads = 2\nffn = 256\nprecision = \"{precision}\"\n\n\
         [main]\nsteps = 80\nbatch = 32\n"
    )
}

/// The validation losses of a run's evaluation rows, in order.
fn val_losses(run: &std::path::Path) -> Vec<f64> {
    read_to_string(run.join("metrics.jsonl"))
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["val_loss"].as_f64())
        .collect()
}

#[test]
fn bf16_products_train_as_f32_does_or_are_refused_in_one_sentence_where_the_cpu_has_none() {
    let dir = TempDir::new();
    let run = |precision: &str| {
        let recipe = dir.write(format!("{precision}.toml"), main_only(precision));
        contrai(["train"])
            .arg(&recipe)
            .arg("--out")
            .arg(dir.path())
            .output()
    };
    let bf16 = run("bf16");
    if !contrai_kernels::bf16::available() {
        bf16.assert_failure().assert_stderr_contains(&[
            "model.precision = \"bf16\": this CPU has no AVX512-BF16",
            "use \"f32\"",
        ]);
        assert!(
            !dir.join("bf16/metrics.jsonl").exists(),
            "refused before any work"
        );
        return;
    }
    bf16.assert_success();
    run("f32").assert_success();
    let (b, f) = (val_losses(&dir.join("bf16")), val_losses(&dir.join("f32")));
    assert_eq!(b.len(), f.len(), "the same evaluations: {b:?} {f:?}");
    assert_ne!(b, f, "the products ran in bf16");
    assert!(b.last() < b.first(), "bf16 trains: {b:?}");
    for (b, f) in b.iter().zip(&f) {
        assert!((b - f).abs() <= 0.05 * f, "bf16 {b} against f32 {f}");
    }
    let recipe = read_to_string(dir.join("bf16/recipe.toml"));
    assert!(recipe.contains("precision = \"bf16\""), "{recipe}");
}
