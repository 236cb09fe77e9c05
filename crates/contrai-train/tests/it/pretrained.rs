//! `model.kind = "bert"`: a pretrained checkpoint (the tiny random BERT fixture) fine-tuned
//! through all five phases — its pretrained weights loaded, its own tokenizer, the feed-forward
//! and attention matrices pruned by their Hugging Face names, int8, a student on the teacher's
//! tokenizer — and every final model predicting what its card recorded.

use crate::common;

use common::{
    Collect, bert_recipe, demo_file, kinds, predictions_match_the_card, safetensors, tiny_bert_dir,
    with_all_phases,
};
use contrai_data::Silent;
use contrai_train::{Options, TrainError, train};

/// `n` messages of 8–16 words the fixture's vocabulary knows, spam or ham by their words (a
/// few shared), numbered so that no two are duplicates.
fn word_file(dir: &std::path::Path, n: usize) -> std::path::PathBuf {
    let spam = [
        "free", "money", "click", "claim", "prize", "offer", "cheap", "now",
    ];
    let ham = [
        "hi", "bob", "meeting", "moved", "tuesday", "cafe", "students", "ok",
    ];
    let shared = ["the", "to", "your", "at", "here", "no"];
    let mut x: u64 = 0x9E37_79B9;
    let mut next = |m: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m as u64) as usize
    };
    let mut lines = Vec::new();
    for i in 0..n {
        let (label, own) = if i % 2 == 0 {
            ("spam", &spam)
        } else {
            ("ham", &ham)
        };
        let words: Vec<&str> = (0..8 + next(9))
            .map(|_| {
                if next(3) == 0 {
                    shared[next(shared.len())]
                } else {
                    own[next(own.len())]
                }
            })
            .collect();
        lines.push(format!(
            "{{\"id\": \"m{i}\", \"text\": \"{} {i}\", \"label\": \"{label}\"}}",
            words.join(" ")
        ));
    }
    let path = dir.join("words.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// `r` through all five phases with contraction forced at main's end whatever the trajectory,
/// its pruning schedule running its course, and refine's int8 kept whatever it costs.
fn every_phase(r: contrai_recipe::Recipe) -> contrai_recipe::Recipe {
    let mut r = with_all_phases(r);
    r.contract.stable_checkpoints = 1000;
    r.refine.max_drop = 100.0;
    (r.contract.prune_every, r.contract.divergence) = (2, 1.0);
    r
}

#[test]
fn a_pretrained_encoder_fine_tunes_through_every_phase() {
    let tmp = tempfile::tempdir().unwrap();
    let data = word_file(tmp.path(), 400);
    let run = tmp.path().join("run");
    let mut r = every_phase(bert_recipe(&data, 60));
    r.validate.lr = 3e-3;
    // The tiny fixture's scan (32 validation samples) moves 2-4 % at 30 % pruning; a 5 % tolerance
    // lets some modules reach their rule's 30 %, so both sides of `min(cap, 0.3)` are exercised.
    r.contract.tolerance = 0.05;
    let out = train(&Options::new(r, &run), &Silent, &Collect::default()).unwrap();
    let e = out.eval.unwrap();
    assert!(e.holdout_accuracy > 0.6, "holdout {}", e.holdout_accuracy);
    let k = kinds(&run);
    for want in [
        "validate_passed",
        "sensitivity",
        "drop_noisiest",
        "enter_contract",
        "enter_refine",
        "int8",
        "distill",
        "holdout",
    ] {
        assert!(k.iter().any(|x| x == want), "{want} missing from {k:?}");
    }
    // The checkpoint's tokenizer travels with the model; the exported weights keep BERT's names.
    assert_eq!(
        std::fs::read(run.join("final/tokenizer.json")).unwrap(),
        std::fs::read(tiny_bert_dir().join("tokenizer.json")).unwrap()
    );
    let w = safetensors(&run.join("final/model.safetensors"));
    let q = &w["bert.encoder.layer.1.attention.self_attn.query.weight"];
    assert_eq!(q.0, [32, 32]);
    // Pruned as the rules say: each module at its rule's 30 % within diagnose's cap, the
    // exported zeros as recorded, the embeddings untouched.
    let caps = common::decisions(&run)
        .into_iter()
        .find(|d| d["kind"] == "sensitivity")
        .unwrap()["evidence"]["caps"]
        .clone();
    let exported = common::zeros_by_module(&run.join("final/model.safetensors"));
    assert_eq!(e.sparsity.len(), 8, "{:?}", e.sparsity);
    for (module, share) in &e.sparsity {
        let want = caps[module].as_f64().unwrap().min(0.3);
        assert!((share - want).abs() < 0.01, "{module}: {share} vs {want}");
        assert!(
            (exported[module] - share).abs() < 1e-9,
            "{module}: exported {}",
            exported[module]
        );
    }
    // Main is too short to pay for measuring each module: the scan was linearized, and its
    // joint check stepped the caps down once on this tiny, sensitive encoder.
    assert!(e.sparsity.values().any(|s| *s > 0.15), "{:?}", e.sparsity);
    let emb = &w["bert.embeddings.word_embeddings.weight"].1;
    assert!(emb.iter().all(|x| *x != 0.0));
    predictions_match_the_card(&run);
    // Exported as a Hugging Face directory: the fixture's names and layouts, the final weights.
    let hf = run.join("final/hf");
    let ours = safetensors(&hf.join("model.safetensors"));
    let theirs = safetensors(&tiny_bert_dir().join("model.safetensors"));
    let names = |m: &std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)>| {
        m.iter()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(&ours),
        names(&theirs),
        "same names and shapes as the checkpoint"
    );
    let q = &w["bert.encoder.layer.1.attention.self_attn.query.weight"].1;
    let q_hf = &ours["bert.encoder.layer.1.attention.self.query.weight"].1;
    assert!(
        (0..32).all(|i| (0..32).all(|j| q[i * 32 + j] == q_hf[j * 32 + i])),
        "transposed back"
    );
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(hf.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["id2label"]["0"], "ham");
    // Mean pooling is no BertForSequenceClassification: its own class and model type, named by
    // auto_map, so that a loader without trust_remote_code refuses instead of pooling [CLS].
    assert_eq!(config["architectures"][0], "ContraiBertForSequenceClassification");
    assert_eq!(config["model_type"], "contrai_bert");
    assert_eq!(
        config["auto_map"]["AutoConfig"],
        "modeling_contrai.ContraiBertConfig"
    );
    assert_eq!(
        config["auto_map"]["AutoModelForSequenceClassification"],
        "modeling_contrai.ContraiBertForSequenceClassification"
    );
    let modeling = std::fs::read_to_string(hf.join("modeling_contrai.py")).unwrap();
    assert!(modeling.contains("class ContraiBertForSequenceClassification"));
    assert!(hf.join("tokenizer.json").is_file());
    let tok: serde_json::Value =
        serde_json::from_slice(&std::fs::read(hf.join("tokenizer_config.json")).unwrap()).unwrap();
    assert_eq!(
        tok["tokenizer_class"], "BertTokenizer",
        "named: the model type cannot tell it"
    );
}

#[test]
fn a_pretrained_directory_that_does_not_fit_is_refused_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 60);
    let mut r = bert_recipe(&data, 10);
    r.model.seq_len = 65; // the fixture has 64 positions
    let err = train(
        &Options::new(r, tmp.path().join("a")),
        &Silent,
        &Collect::default(),
    )
    .unwrap_err();
    assert!(matches!(err, TrainError::Pretrained(_)), "{err}");
    assert!(err.to_string().contains("max_position_embeddings 64"), "{err}");
    let mut r = bert_recipe(&data, 10);
    r.model.pretrained = Some(tmp.path().display().to_string());
    let err = train(
        &Options::new(r, tmp.path().join("b")),
        &Silent,
        &Collect::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("no config.json"), "{err}");
    assert!(
        !contrai_run::RunDir::new(tmp.path().join("b")).is_started(),
        "nothing trained"
    );
}

/// The fixture's LoRA recipe: rank 4 on query and value, at an LR that moves the adapters.
fn lora_recipe(data: &std::path::Path, steps: u64) -> contrai_recipe::Recipe {
    let mut r = bert_recipe(data, steps);
    r.model.lora = Some(contrai_recipe::recipe::Lora {
        rank: 4,
        alpha: 8.0,
        targets: vec!["query".into(), "value".into()],
    });
    r.main.lr = 5e-3;
    r
}

#[test]
fn a_lora_fine_tune_trains_only_its_adapters_and_head_then_exports_them_merged() {
    let tmp = tempfile::tempdir().unwrap();
    let data = word_file(tmp.path(), 400);
    let run = tmp.path().join("run");
    // The checkpoint from a copy that is gone by the time the model predicts.
    let model = tmp.path().join("model");
    std::fs::create_dir(&model).unwrap();
    for f in std::fs::read_dir(tiny_bert_dir()).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, model.join(f.file_name().unwrap())).unwrap();
    }
    let mut r = lora_recipe(&data, 60);
    r.model.pretrained = Some(model.display().to_string());
    let out = train(&Options::new(r, &run), &Silent, &Collect::default()).unwrap();
    std::fs::remove_dir_all(&model).unwrap();
    let e = out.eval.unwrap();
    assert!(e.holdout_accuracy > 0.6, "holdout {}", e.holdout_accuracy);
    // The exported Hugging Face weights against the checkpoint's: query and value moved (their
    // adapters merged in), every other encoder tensor bit for bit the pretrained one.
    let ours = safetensors(&run.join("final/hf/model.safetensors"));
    let theirs = safetensors(&tiny_bert_dir().join("model.safetensors"));
    assert!(ours.keys().all(|k| !k.contains("lora")), "{:?}", ours.keys());
    let mut moved = Vec::new();
    for (name, (shape, v)) in theirs.iter().filter(|(k, _)| k.starts_with("bert.")) {
        let (s, w) = &ours[name];
        assert_eq!(s, shape, "{name}");
        if w != v {
            moved.push(name.as_str());
        }
    }
    let want: Vec<String> = (0..2)
        .flat_map(|l| ["query", "value"].map(|m| format!("bert.encoder.layer.{l}.attention.self.{m}.weight")))
        .collect();
    assert_eq!(moved, want, "only the adapted matrices changed");
    assert_ne!(
        ours["classifier.weight"], theirs["classifier.weight"],
        "the head trained"
    );
    predictions_match_the_card(&run);
}

#[test]
fn gradient_checkpointing_trains_the_same_run_on_a_lora_encoder_and_says_so() {
    // LoRA through main (the adapters' gradients through the recomputed layers), the merged
    // encoder in contract: the recomputed backward trains what the plain one trains.
    let tmp = tempfile::tempdir().unwrap();
    let data = word_file(tmp.path(), 300);
    let mut r = every_phase(lora_recipe(&data, 20));
    r.model.dropout = 0.1;
    let plain = tmp.path().join("plain");
    train(&Options::new(r.clone(), &plain), &Silent, &Collect::default()).unwrap();
    r.model.gradient_checkpointing = true;
    let recomputed = tmp.path().join("recomputed");
    train(&Options::new(r, &recomputed), &Silent, &Collect::default()).unwrap();
    let losses = |run: &std::path::Path| -> Vec<f64> {
        common::rows(&run.join("metrics.jsonl"))
            .iter()
            .filter_map(|row| row["train_loss"].as_f64())
            .collect()
    };
    let (a, b) = (losses(&plain), losses(&recomputed));
    assert!(a.len() > 20, "{} training rows", a.len());
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= 1e-4 * x.abs().max(1e-3), "row {i}: {x} vs {y}");
    }
    let card: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(recomputed.join("final/model-card.json")).unwrap())
            .unwrap();
    assert_eq!(card["gradient_checkpointing"], true, "{card}");
}

#[test]
fn a_lora_fine_tune_contracts_its_merged_encoder_through_every_phase() {
    let tmp = tempfile::tempdir().unwrap();
    let data = word_file(tmp.path(), 400);
    let run = tmp.path().join("run");
    let mut r = every_phase(lora_recipe(&data, 40));
    r.validate.adapter_lr = 1e-2;
    let out = train(&Options::new(r, &run), &Silent, &Collect::default()).unwrap();
    // Validate knew an adapter job: its LR and fall, and every adapter and the head got a gradient.
    let decisions = std::fs::read_to_string(run.join("decisions.jsonl")).unwrap();
    let passed: serde_json::Value = decisions
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|d| d["kind"] == "validate_passed")
        .unwrap();
    let e = &passed["evidence"];
    assert_eq!(
        (e["adapters"].as_bool(), e["lr"].as_f64(), e["min_fall"].as_f64()),
        (Some(true), Some(1e-2), Some(0.5)),
        "{e}"
    );
    assert_eq!(e["no_gradient"], serde_json::json!([]), "{e}");
    // The plan counts the checkpoint's parameters (24,482 in the fixture; positions beyond the
    // recipe's length and token types aside), not the recipe's own sizes'.
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("plan.json")).unwrap()).unwrap();
    let counted = plan["parameters"].as_f64().unwrap();
    assert!((counted / 24_482.0 - 1.0).abs() < 0.1, "{counted}");
    let k = kinds(&run);
    for want in [
        "validate_passed",
        "sensitivity",
        "enter_contract",
        "int8",
        "holdout",
    ] {
        assert!(k.iter().any(|x| x == want), "{want} missing from {k:?}");
    }
    // Pruned after the merge: the exported zeros are the recorded sparsity, not refilled by
    // an adapter's delta.
    let e = out.eval.unwrap();
    let exported = common::zeros_by_module(&run.join("final/model.safetensors"));
    assert!(e.sparsity.values().any(|s| *s > 0.1), "{:?}", e.sparsity);
    for (module, share) in &e.sparsity {
        assert!(
            (exported[module] - share).abs() < 1e-9,
            "{module}: exported {}",
            exported[module]
        );
    }
    predictions_match_the_card(&run);
}

#[test]
fn a_pretrained_encoder_loses_whole_heads_with_their_output_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let data = word_file(tmp.path(), 400);
    let run = tmp.path().join("run");
    let mut r = every_phase(bert_recipe(&data, 40));
    r.validate.lr = 3e-3;
    r.contract.prune_heads = true;
    r.contract.prune[0].final_sparsity = 0.5; // attention: 2 of the fixture's 4 heads
    r.contract.tolerance = 1.0; // diagnose caps little: a random encoder's heads all matter
    let out = train(&Options::new(r, &run), &Silent, &Collect::default()).unwrap();
    let e = out.eval.unwrap();
    let w = safetensors(&run.join("final/model.safetensors"));
    let mut heads_gone = 0;
    for l in 0..2 {
        let at = |n: &str| &w[&format!("bert.encoder.layer.{l}.{n}.weight")].1;
        let q = at("attention.self_attn.query");
        let o = at("attention.output.dense");
        for h in 0..4 {
            let cols = (0..32).all(|r| (0..8).all(|c| q[r * 32 + h * 8 + c] == 0.0));
            let rows = (0..8).all(|r| (0..32).all(|c| o[(h * 8 + r) * 32 + c] == 0.0));
            assert_eq!(
                cols, rows,
                "layer {l} head {h}: its query columns and output rows go together"
            );
            heads_gone += usize::from(cols);
        }
        let share = e.sparsity[&format!("bert.encoder.layer.{l}.attention.self_attn")];
        assert!(
            (share * 4.0 - (share * 4.0).round()).abs() < 1e-9,
            "whole heads: {share}"
        );
    }
    let caps = common::decisions(&run)
        .into_iter()
        .find(|d| d["kind"] == "sensitivity")
        .unwrap()["evidence"]
        .clone();
    assert!(heads_gone > 0, "{:?} {caps}", e.sparsity);
    predictions_match_the_card(&run);
}

#[test]
fn the_plan_calibrates_a_pretrained_encoders_step() {
    let tmp = tempfile::tempdir().unwrap();
    let data = word_file(tmp.path(), 40);
    let recipe = contrai_train::setup::sized(common::bert_recipe(&data, 10)).unwrap();
    let c = contrai_train::calibrate::calibrate(&recipe, 2).unwrap();
    assert_eq!(c.steps, 2);
    assert!(
        c.ms_per_step > 0.0 && c.ms_per_part[1] > 0.0 && c.ms_per_part[2] > 0.0,
        "{c:?}"
    );
    // An MLP's step is not timed on random tokens: the refusal says what to do instead.
    let mut mlp = recipe.clone();
    mlp.model.kind = contrai_recipe::ModelKind::Mlp;
    let err = contrai_train::calibrate::calibrate(&mlp, 2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("mlp") && err.contains("contrai train"), "{err}");
}
