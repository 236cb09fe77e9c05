//! Pruning through the lifecycle on the Burn engine: gradual magnitude pruning to capped targets
//! with real zeros, whole heads (globally, and measured by diagnose), and masks that survive
//! checkpoints, resumes and every optimizer step.

use crate::common;

use std::path::Path;

use common::{
    Collect, decisions, demo_file, lifecycle_recipe, rows, safetensor, safetensors, zeros_by_module,
};
use contrai_data::Silent;
use contrai_recipe::Phase;
use contrai_recipe::Recipe;
use contrai_train::{Options, train};

/// The tiny lifecycle with a contraction that runs its course: forced at main's planned end,
/// never rolled back, no module frozen, the masks updated every 2 steps.
fn steady_pruning(data: &Path) -> Recipe {
    let mut r = lifecycle_recipe(data, 40);
    r.contract.stable_checkpoints = 1000;
    r.contract.patience = 1000;
    r.contract.divergence = 1.0;
    r.contract.prune_every = 2;
    r
}

#[test]
fn gradual_pruning_reaches_its_capped_targets_and_the_zeros_are_real() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = steady_pruning(&data);
    recipe.contract.prune = vec![
        contrai_recipe::recipe::Prune {
            params: "blocks.*.attn.*".into(),
            init: 0.1,
            final_sparsity: 0.6,
        },
        contrai_recipe::recipe::Prune {
            params: "blocks.*.ffn.*".into(),
            init: 0.1,
            final_sparsity: 0.5,
        },
    ];
    recipe.run.phases.retain(|p| *p != Phase::Diagnose); // caps: attention's 20 % only
    let out = train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap();
    let e = out.eval.unwrap();
    assert!(
        (e.sparsity["blocks.0.attn"] - 0.2).abs() < 1e-3,
        "attention capped at 20 %: {:?}",
        e.sparsity
    );
    assert!(
        (e.sparsity["blocks.0.ffn"] - 0.5).abs() < 1e-3,
        "{:?}",
        e.sparsity
    );
    // The masks were applied after every optimizer step of contract and refine: the zeros in the
    // exported weights are exactly the masked share.
    let zeros = zeros_by_module(&run.join("final/model.safetensors"));
    for (m, s) in &e.sparsity {
        assert!(
            (zeros[m] - s).abs() < 1e-3,
            "{m}: {} zeros vs {s} masked",
            zeros[m]
        );
    }
    // Sparsity grows on the cubic schedule, never down, and never past a cap.
    let m = rows(&run.join("metrics.jsonl"));
    let ffn: Vec<f64> = m
        .iter()
        .filter_map(|r| r.get("sparsity/blocks.0.ffn")?.as_f64())
        .collect();
    let attn: Vec<f64> = m
        .iter()
        .filter_map(|r| r.get("sparsity/blocks.0.attn")?.as_f64())
        .collect();
    assert!((ffn[0] - 0.1).abs() < 1e-3, "starts at init: {ffn:?}");
    assert!(ffn.windows(2).all(|w| w[1] >= w[0]), "{ffn:?}");
    assert!(
        ffn[1] - ffn[0] > ffn[ffn.len() - 1] - ffn[ffn.len() - 2],
        "cubic: fast early, slow late: {ffn:?}"
    );
    assert!(attn.iter().all(|&s| s <= 0.2 + 1e-9), "{attn:?}");
}

#[test]
fn whole_heads_pruned_globally_in_contract_leave_the_exported_matrices() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = steady_pruning(&data);
    recipe.contract.prune_heads = true;
    recipe.contract.prune_scope = contrai_recipe::PruneScope::Global;
    let layers = recipe.model.layers;
    recipe.contract.prune[0].final_sparsity = 0.5; // one of the two heads of each block
    recipe.run.phases.retain(|p| *p != Phase::Diagnose);
    recipe.refine.distill.enabled = false;
    let out = train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap();
    let e = out.eval.unwrap();
    assert!(e.student.is_none());
    assert_eq!(e.sparsity["blocks.0.attn"], 0.5, "whole heads: {:?}", e.sparsity);
    // The pruned head left the exported matrices ([d_in, d_out]): one head of 16 remains.
    let file = safetensors(&run.join("final/model.safetensors"));
    for b in 0..layers {
        let at = |n: &str| file[&format!("blocks.{b}.attn.{n}.weight")].0.clone();
        assert_eq!(at("query"), [32, 16]);
        assert_eq!(at("value"), [32, 16]);
        assert_eq!(at("output"), [16, 32]);
        assert!(
            file[&format!("blocks.{b}.attn.query.weight")]
                .1
                .iter()
                .any(|w| *w != 0.0)
        );
    }
}

#[test]
fn heads_and_units_pruned_whole_leave_a_smaller_model_that_predicts_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = steady_pruning(&data);
    recipe.contract.prune_heads = true;
    recipe.contract.prune_units = true;
    recipe.contract.prune[0].final_sparsity = 0.5; // one of the two heads of each block
    recipe.contract.prune[1].final_sparsity = 0.3;
    recipe.run.phases.retain(|p| *p != Phase::Diagnose);
    recipe.refine.distill.enabled = false;
    let (ffn, layers) = (recipe.model.ffn, recipe.model.layers);
    let out = train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap();
    let e = out.eval.unwrap();
    let gone = (0.3 * ffn as f64).floor() as usize;
    assert!(
        (e.sparsity["blocks.0.ffn"] - gone as f64 / ffn as f64).abs() < 1e-9,
        "{:?}",
        e.sparsity
    );
    let path = run.join("final/model.safetensors");
    let file = safetensors(&path);
    for b in 0..layers {
        let shape = |n: &str| file[&format!("blocks.{b}.{n}")].0.clone();
        assert_eq!(shape("ffn.up.weight"), [32, ffn - gone]);
        assert_eq!(shape("ffn.up.bias"), [ffn - gone]);
        assert_eq!(shape("ffn.down.weight"), [ffn - gone, 32]);
        assert_eq!(shape("attn.key.weight"), [32, 16]);
    }
    // No pruned zeros are left in what remains of the pruned matrices.
    for (name, (_, v)) in &file {
        if name.contains(".ffn.") && name.ends_with("weight") {
            let zeros = v.iter().filter(|w| **w == 0.0).count();
            assert!(zeros * 100 < v.len(), "{name}: {zeros} zeros of {}", v.len());
        }
    }
    // The model card counts what the file holds and says what was removed.
    let card: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("final/model-card.json")).unwrap()).unwrap();
    let f32 = &card["variants"][0];
    let held: usize = file.values().map(|(s, _)| s.iter().product::<usize>()).sum();
    assert_eq!(f32["parameters"].as_u64().unwrap() as usize, held);
    let note = f32["note"].as_str().unwrap();
    let (heads, units) = (
        format!("{layers} of {} attention heads", 2 * layers),
        format!("{} of {}", layers * gone, layers * ffn),
    );
    assert!(note.contains(&heads) && note.contains(&units), "{note}");
    // `predict` loads the smaller file and gets the card's holdout accuracy.
    common::predictions_match_the_card(&run);
}

#[test]
fn masks_survive_a_checkpoint_a_resume_and_every_optimizer_step() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let mut recipe = steady_pruning(&data);
    recipe.refine.distill.enabled = false;
    let whole = tmp.path().join("whole");
    train(
        &Options::new(recipe.clone(), &whole),
        &Silent,
        &Collect::default(),
    )
    .unwrap();
    let entry = decisions(&whole)
        .into_iter()
        .find(|d| d["kind"] == "enter_contract")
        .unwrap()["step"]
        .as_u64()
        .unwrap();

    // Stop inside contract, after the masks of its first checkpoint (entry + 5), then resume.
    let run = tmp.path().join("resumed");
    let mut opts = Options::new(recipe, &run);
    opts.stop_after = Some(entry + 7);
    let out = train(&opts, &Silent, &Collect::default()).unwrap();
    assert!(!out.finished);
    let ck = run
        .join("checkpoints")
        .join(contrai_train::checkpoint::dir_name(entry + 5));
    let masks: contrai_train::prune::Masks =
        serde_json::from_slice(&std::fs::read(ck.join("masks.json")).unwrap()).unwrap();
    assert!(
        masks.overall() > 0.0,
        "pruning had begun: {:?}",
        masks.by_module()
    );
    opts.resume = true;
    opts.stop_after = None;
    train(&opts, &Silent, &Collect::default()).unwrap();

    // The resumed run ends with the same weights as the one never stopped ...
    let weights = |r: &Path| safetensors(&r.join("final/model.safetensors"));
    assert!(weights(&run) == weights(&whole), "resumed weights differ");
    // ... and every weight masked at that checkpoint is still exactly zero after all the
    // optimizer steps of contract and refine that followed.
    for (path, (len, _)) in &masks.keep {
        let w = safetensor(&run.join("final/model.safetensors"), path);
        let flags = masks.keep_flags(path, *len);
        let revived = w
            .iter()
            .zip(&flags)
            .filter(|(v, keep)| !**keep && **v != 0.0)
            .count();
        assert_eq!(revived, 0, "{path}: {revived} masked weights are not zero");
    }
}

#[test]
fn with_whole_heads_diagnose_measures_heads_and_leaves_attention_uncapped_by_the_single_weight_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = steady_pruning(&data);
    recipe.contract.prune_heads = true;
    recipe.contract.prune[0].final_sparsity = 0.5; // one of the two heads of each block
    recipe.contract.tolerance = 1.0; // diagnose's measured caps do not bind on this tiny model
    recipe.refine.distill.enabled = false;
    let out = train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap();
    let sens = decisions(&run)
        .into_iter()
        .find(|d| d["kind"] == "sensitivity")
        .expect("diagnose ran");
    let caps = &sens["evidence"]["caps"];
    // Attention was measured by whole heads: 50 % is one head, not 20 % of single weights.
    assert_eq!(caps["blocks.0.attn"], 0.5, "{caps}");
    let alone = &sens["evidence"]["sensitivity"]["blocks.0.attn"];
    assert_eq!(alone[0]["increase"], 0.0, "10 % of two heads is no head: {alone}");
    let e = out.eval.unwrap();
    assert_eq!(e.sparsity["blocks.0.attn"], 0.5, "{:?}", e.sparsity);
    let file = safetensors(&run.join("final/model.safetensors"));
    assert_eq!(
        file["blocks.0.attn.query.weight"].0,
        [32, 16],
        "one head of block 0 is gone"
    );
}
