//! `contrai predict` on a finished transformer run: each final model (f32, int8, student) scores on
//! the holdout file exactly the accuracy its model card recorded; CSV input gives the same rows;
//! what cannot be predicted is refused with the file and the reason.

use crate::common;

use common::{
    Collect, demo_file, forced_contract, holdout_file, lifecycle_recipe, predict, predictions_match_the_card,
    rows, tiny_recipe,
};
use contrai_data::Silent;
use contrai_run::FinalModel;
use contrai_train::predict::Predictor;
use contrai_train::{Options, train};

#[test]
fn every_final_model_predicts_its_recorded_holdout_accuracy() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = forced_contract(lifecycle_recipe(&data, 40));
    recipe.refine.max_drop = 100.0; // int8 kept whatever it costs: this test needs its file
    train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap();
    for f in ["model.safetensors", "model-int8.bpk", "student.safetensors"] {
        assert!(run.join("final").join(f).is_file(), "{f}");
    }
    predictions_match_the_card(&run);

    // The same samples as CSV (labels removed): the same predictions, no accuracy.
    let hold = holdout_file(&run);
    let mut csv = String::from("id,text\n");
    for r in rows(&hold) {
        let text = r["text"].as_str().unwrap().replace('"', "\"\"");
        csv.push_str(&format!("{},\"{text}\"\n", r["id"].as_str().unwrap()));
    }
    let csv_file = tmp.path().join("new.csv");
    std::fs::write(&csv_file, csv).unwrap();
    let (from_jsonl, _) = predict(&run, &hold, FinalModel::Int8);
    let (from_csv, summary) = predict(&run, &csv_file, FinalModel::Int8);
    assert_eq!(summary.accuracy, None);
    assert_eq!(summary.labelled, 0);
    for (a, b) in from_jsonl.iter().zip(&from_csv) {
        assert_eq!(
            (&a.id, &a.label, &a.probabilities),
            (&b.id, &b.label, &b.probabilities)
        );
        assert!(b.given.is_none());
    }
    assert_eq!(from_jsonl.len(), from_csv.len());

    // A file without the run's text field: the file and the fields it has are named.
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"id\": \"a\", \"body\": \"hello\"}\n").unwrap();
    let p = Predictor::open(&run, FinalModel::F32).unwrap();
    let src = contrai_data::Source::file(&bad, None).unwrap();
    let err = p.predict(&src, &mut Vec::new(), &Silent).unwrap_err().to_string();
    assert!(
        err.contains("bad.jsonl") && err.contains("text") && err.contains("body"),
        "{err}"
    );
}

#[test]
fn what_a_run_cannot_predict_is_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 120);
    let run = tmp.path().join("run");
    let err = |run: &std::path::Path, which| Predictor::open(run, which).err().unwrap().to_string();
    assert!(err(&run, FinalModel::F32).contains("not a run directory"));
    train(
        &Options::new(tiny_recipe(&data, 10), &run),
        &Silent,
        &Collect::default(),
    )
    .unwrap();
    // A main-only run exports the f32 model and nothing else.
    predict(&run, &holdout_file(&run), FinalModel::F32);
    let e = err(&run, FinalModel::Student);
    assert!(
        e.contains("student.safetensors") && e.contains("distilled no student"),
        "{e}"
    );
    let e = err(&run, FinalModel::Int8);
    assert!(e.contains("model-int8.bpk") && e.contains("compress"), "{e}");
    std::fs::remove_file(run.join("final/eval.json")).unwrap();
    assert!(err(&run, FinalModel::F32).contains("no finished model"));
}
