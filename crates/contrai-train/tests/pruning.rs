//! Pruning through the lifecycle on the Burn engine: gradual magnitude pruning to capped targets
//! with real zeros, whole heads (globally, and measured by diagnose), and masks that survive
//! checkpoints, resumes and every optimizer step.

mod common;

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
fn whole_heads_pruned_globally_in_contract_leave_dead_heads() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = steady_pruning(&data);
    recipe.contract.prune_heads = true;
    recipe.contract.prune_scope = contrai_recipe::PruneScope::Global;
    recipe.contract.prune[0].final_sparsity = 0.5; // one of the two heads of each block
    recipe.run.phases.retain(|p| *p != Phase::Diagnose);
    recipe.refine.distill.enabled = false;
    let out = train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap();
    let e = out.eval.unwrap();
    assert!(e.student.is_none());
    assert_eq!(e.sparsity["blocks.0.attn"], 0.5, "whole heads: {:?}", e.sparsity);
    // In the exported query matrix ([d_in, d_out]), one head's columns are all zero, the other's not.
    let w = safetensor(&run.join("final/model.safetensors"), "blocks.0.attn.query.weight");
    let d = 32;
    let dead: Vec<bool> = (0..2)
        .map(|h| (0..d).all(|r| (h * 16..(h + 1) * 16).all(|c| w[r * d + c] == 0.0)))
        .collect();
    assert_eq!(dead.iter().filter(|x| **x).count(), 1, "{dead:?}");
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
    let w = safetensor(&run.join("final/model.safetensors"), "blocks.0.attn.query.weight");
    let d = 32;
    let dead = (0..2)
        .filter(|h| (0..d).all(|r| (h * 16..(h + 1) * 16).all(|c| w[r * d + c] == 0.0)))
        .count();
    assert_eq!(dead, 1, "one head of block 0 is gone");
}
