//! The MLP on numeric features through `train`: features read from JSONL arrays and CSV strings,
//! standardised on train only, all five phases (pruning its hidden layers, int8, a student), the
//! holdout read once, exact resume, and the errors a numeric data set can raise.

use crate::common;

use std::path::{Path, PathBuf};

use common::{Collect, metrics_of, safetensors};
use contrai_data::Silent;
use contrai_recipe::Recipe;
use contrai_train::{Options, TrainError, train};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` samples of 8 features (two of them noise at a large scale, one constant) and 3 classes
/// set by a nonlinear rule on the first three; `csv` writes the features as one string column.
fn numeric_file(dir: &Path, n: usize, csv: bool) -> PathBuf {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut lines = Vec::with_capacity(n + 1);
    if csv {
        lines.push("id,x,label".to_string());
    }
    for i in 0..n {
        let mut x: Vec<f64> = (0..5).map(|_| rng.random::<f64>() * 2.0 - 1.0).collect();
        x.extend([rng.random::<f64>() * 1000.0, rng.random::<f64>() * -50.0, 3.0]);
        let s = x[0] * x[1] * 4.0 + x[2];
        let label = if s < -0.4 {
            "low"
        } else if s < 0.4 {
            "mid"
        } else {
            "high"
        };
        let v: Vec<String> = x.iter().map(|v| format!("{v:.4}")).collect();
        lines.push(if csv {
            format!("n{i},\"{}\",{label}", v.join(" "))
        } else {
            format!(
                "{{\"id\": \"n{i}\", \"x\": [{}], \"label\": \"{label}\"}}",
                v.join(", ")
            )
        });
    }
    let path = dir.join(if csv { "num.csv" } else { "num.jsonl" });
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn mlp_recipe(data: &Path, steps: u64) -> Recipe {
    let text = format!(
        "[run]\nname = \"mlp\"\neval_every = 25\ncheckpoint_every = 25\n\
         [data]\npath = \"{}\"\ntext = \"x\"\n\
         [model]\nkind = \"mlp\"\nlayers = 2\nffn = 64\n\
         [main]\nsteps = {steps}\nlr = 3e-3\n\
         [refine.distill]\nsteps = 600\nffn = 32\nlr = 5e-3\n",
        data.display()
    );
    Recipe::parse(&text, Path::new("mlp.toml")).unwrap()
}

#[test]
fn an_mlp_trains_through_all_phases_on_numeric_features() {
    let dir = tempfile::tempdir().unwrap();
    let data = numeric_file(dir.path(), 3000, false);
    let run = dir.path().join("run");
    let out = train(
        &Options::new(mlp_recipe(&data, 400), &run),
        &Silent,
        &Collect::default(),
    )
    .unwrap();
    let eval = out.eval.unwrap();
    assert!(
        eval.holdout_accuracy >= 0.9,
        "holdout accuracy {}",
        eval.holdout_accuracy
    );
    assert_eq!(eval.holdout_reads, 1);
    // The data stage compared the vectors as numbers: a clean set loses nothing.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("data/manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["params"]["index"]["content"], "numeric");
    let dropped: u64 = manifest["dropped"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(dropped, 0, "{}", manifest["dropped"]);
    let scaler: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("final/features.json")).unwrap()).unwrap();
    assert_eq!(scaler["dim"], 8);
    assert_eq!(scaler["std"][7], 1.0, "a constant feature is left unscaled");
    let mean6 = scaler["mean"][6].as_f64().unwrap();
    assert!(
        (-30.0..-20.0).contains(&mean6),
        "the train mean of feature 6: {mean6}"
    );
    // Exported under the module's own paths; diagnose measured the hidden layers.
    let w = safetensors(&run.join("final/model.safetensors"));
    assert_eq!(w["layers.0.weight"].0, [8, 64]);
    assert_eq!(w["head.weight"].0, [64, 3]);
    let decisions = std::fs::read_to_string(run.join("decisions.jsonl")).unwrap();
    for kind in [
        "validate_passed",
        "sensitivity",
        "enter_contract",
        "enter_refine",
        "distill",
        "holdout",
    ] {
        assert!(
            decisions.contains(&format!("\"kind\":\"{kind}\"")),
            "no {kind} in {decisions}"
        );
    }
    assert!(
        decisions.contains("layers.0") && decisions.contains("layers.1"),
        "{decisions}"
    );
    assert!(eval.int8.is_some_and(|q| q.kept && q.bytes * 3 < q.dense_bytes));
    let student = eval.student.unwrap();
    assert!(student.parameters < w.values().map(|(_, v)| v.len()).sum::<usize>() / 2);
    assert!(
        student.holdout_accuracy >= 0.8,
        "student {}",
        student.holdout_accuracy
    );
    // `contrai predict` with the run's scaler: each model scores what its card says.
    common::predictions_match_the_card(&run);
}

#[test]
fn an_mlp_run_resumes_exactly_and_reads_csv_feature_strings() {
    let dir = tempfile::tempdir().unwrap();
    let data = numeric_file(dir.path(), 1200, true);
    let mut r = mlp_recipe(&data, 120);
    r.refine.distill.enabled = false;
    let whole = dir.path().join("whole");
    train(&Options::new(r.clone(), &whole), &Silent, &Collect::default()).unwrap();
    let cut = dir.path().join("cut");
    let mut opts = Options::new(r, &cut);
    opts.stop_after = Some(70);
    assert!(!train(&opts, &Silent, &Collect::default()).unwrap().finished);
    opts.stop_after = None;
    opts.resume = true;
    let out = train(&opts, &Silent, &Collect::default()).unwrap();
    assert!(out.finished && out.resumed_from.is_some());
    assert_eq!(metrics_of(&cut), metrics_of(&whole));
    assert_eq!(
        safetensors(&cut.join("final/model.safetensors")),
        safetensors(&whole.join("final/model.safetensors"))
    );
}

#[test]
fn numeric_data_errors_name_the_sample_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let data = numeric_file(dir.path(), 400, false);
    let mut text = std::fs::read_to_string(&data).unwrap();
    text.push_str("{\"id\": \"short\", \"x\": [1, 2], \"label\": \"low\"}\n");
    std::fs::write(&data, text).unwrap();
    let err = train(
        &Options::new(mlp_recipe(&data, 10), dir.path().join("a")),
        &Silent,
        &Collect::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("sample `short`, field `x`: 2 numbers where the train partition has 8"),
        "{err}"
    );

    let mut r = mlp_recipe(&data, 10);
    r.data.path = String::new();
    let err = train(
        &Options::new(r, dir.path().join("b")),
        &Silent,
        &Collect::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, TrainError::Unsupported(_)) && err.to_string().contains("set data.path"),
        "{err}"
    );
    let mut r = mlp_recipe(&data, 10);
    r.contract.prune_heads = true;
    let err = train(
        &Options::new(r, dir.path().join("c")),
        &Silent,
        &Collect::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("an MLP has none"), "{err}");
    let mut r = mlp_recipe(&data, 10);
    r.contract.prune_units = true;
    let err = train(
        &Options::new(r, dir.path().join("d")),
        &Silent,
        &Collect::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("prune_units") && err.to_string().contains("an MLP has none"),
        "{err}"
    );
}
