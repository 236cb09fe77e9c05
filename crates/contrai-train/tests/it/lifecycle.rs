//! The lifecycle's rules on the Burn engine, each driven by a planted condition: a NaN at a chosen
//! step, label noise that makes the model overfit, a main phase that stabilises, a contraction
//! that hurts, a batch request below half, a pipeline that cannot learn. (Pruning: `pruning.rs`.)

use crate::common;

use std::path::{Path, PathBuf};

use common::{Collect, decisions, demo_file, forced_contract, kinds, lifecycle_recipe, rows, tiny_recipe};
use contrai_data::Silent;

use contrai_train::{Options, TrainError, train};
use serde_json::Value;

/// The demo set with the label of every row whose hash falls under `share` flipped.
fn noisy_file(dir: &Path, base: usize, share: f64) -> PathBuf {
    let clean = demo_file(dir, base);
    let text = std::fs::read_to_string(&clean).unwrap();
    let mut labels: Vec<String> = Vec::new();
    let mut out = String::new();
    let parsed: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for v in &parsed {
        let l = v["label"].as_str().unwrap().to_string();
        if !labels.contains(&l) {
            labels.push(l);
        }
    }
    for (i, mut v) in parsed.into_iter().enumerate() {
        let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
        if (h as f64 / (1u64 << 53) as f64) < share {
            let l = v["label"].as_str().unwrap();
            let other = labels.iter().find(|x| *x != l).unwrap().clone();
            v["label"] = Value::String(other);
        }
        out.push_str(&v.to_string());
        out.push('\n');
    }
    let path = dir.join("noisy.jsonl");
    std::fs::write(&path, out).unwrap();
    path
}

#[test]
fn all_five_phases_run_in_order_and_the_holdout_is_read_last() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let out = train(
        &Options::new(forced_contract(lifecycle_recipe(&data, 40)), &run),
        &Silent,
        &Collect::default(),
    )
    .unwrap();
    assert!(out.finished);
    let mut phases: Vec<String> = Vec::new();
    for r in rows(&run.join("metrics.jsonl")) {
        let p = r["phase"].as_str().unwrap().to_string();
        if phases.last() != Some(&p) {
            phases.push(p);
        }
    }
    // Main is too short to pay for measuring each module: diagnose's scan is linearized on a
    // validation subsample and evaluates no whole set, so it writes decisions and no metrics row.
    assert_eq!(
        phases,
        ["validate", "main", "contract", "refine"],
        "metrics phases"
    );
    let k = kinds(&run);
    assert_eq!(k.first().map(String::as_str), Some("validate_passed"), "{k:?}");
    assert_eq!(k.last().map(String::as_str), Some("holdout"), "{k:?}");
    for want in [
        "checkpoint_round_trip",
        "doctor",
        "sensitivity",
        "drop_noisiest",
        "enter_contract",
        "enter_refine",
    ] {
        assert!(k.iter().any(|x| x == want), "{want} missing from {k:?}");
    }
    let scan = decisions(&run)
        .into_iter()
        .find(|d| d["kind"] == "sensitivity")
        .unwrap();
    assert_eq!(scan["evidence"]["scan"], "linearized");
    // The noisiest 2 % are named by id and never trained on again.
    let drop = decisions(&run)
        .into_iter()
        .find(|d| d["kind"] == "drop_noisiest")
        .unwrap();
    let n = drop["evidence"]["count"].as_u64().unwrap();
    assert_eq!(drop["evidence"]["ids"].as_array().unwrap().len() as u64, n);
    assert!(n > 0);
    // Only samples above the noisy-loss floor (ln 2), looked for once.
    assert!(drop["evidence"]["loss_cutoff"].as_f64().unwrap() > std::f64::consts::LN_2);
    assert_eq!(k.iter().filter(|x| *x == "drop_noisiest").count(), 1, "{k:?}");
    // Contract trains at its own batch with the LR annealed from main's last value, no warmup.
    let m = rows(&run.join("metrics.jsonl"));
    let train_rows: Vec<&Value> = m.iter().filter(|r| r.get("train_loss").is_some()).collect();
    let last_main = train_rows.iter().rev().find(|r| r["phase"] == "main").unwrap();
    let contract: Vec<&&Value> = train_rows.iter().filter(|r| r["phase"] == "contract").collect();
    assert_eq!(contract[0]["batch_size"], 4);
    let lrs: Vec<f64> = contract.iter().map(|r| r["lr"].as_f64().unwrap()).collect();
    assert!(
        lrs.windows(2).all(|w| w[1] < w[0]),
        "contract LR must fall: {lrs:?}"
    );
    assert!(lrs[0] <= last_main["lr"].as_f64().unwrap() * (1.0 + 1e-9));
    let e = out.eval.unwrap();
    assert_eq!(e.holdout_reads, 1);
    // Int8: kept (file written) exactly when it lost at most max_drop validation points.
    let q = e.int8.expect("refine quantizes to int8 by default");
    // Biases and norms stay f32: a large share of a model this tiny (the default model: > 3.5x).
    assert!(
        q.dense_bytes as f64 / q.bytes as f64 > 3.0,
        "{} vs {} bytes",
        q.dense_bytes,
        q.bytes
    );
    assert_eq!(q.kept, q.drop_points <= 1.0);
    assert_eq!(run.join("final/model-int8.bpk").is_file(), q.kept);
    let k = kinds(&run);
    assert!(
        k.iter().any(|x| x == if q.kept { "int8" } else { "refuse_int8" }),
        "{k:?}"
    );
    // The student: distilled before the holdout's one read, smaller, exported with its log.
    let s = e.student.expect("refine distils a student by default");
    let card: Value =
        serde_json::from_slice(&std::fs::read(run.join("final/model-card.json")).unwrap()).unwrap();
    assert!(
        s.parameters < card["parameters"].as_u64().unwrap() as usize,
        "{s:?}"
    );
    assert!(run.join("final/student.safetensors").is_file());
    let names: Vec<&str> = card["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["f32", "int8", "student"]);
    let distill = k.iter().position(|x| x == "distill").expect("a distill decision");
    assert!(distill < k.len() - 1, "distilled before the holdout: {k:?}");
}

#[test]
fn int8_is_refused_when_it_costs_more_than_max_drop() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = lifecycle_recipe(&data, 40);
    recipe.refine.max_drop = 0.0;
    let out = train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap();
    let q = out.eval.unwrap().int8.unwrap();
    // With no drop allowed, the verdict follows the sign of the measured change.
    assert_eq!(q.kept, q.drop_points <= 0.0, "{q:?}");
    assert_eq!(run.join("final/model-int8.bpk").is_file(), q.kept);
}

#[test]
fn a_nan_at_a_chosen_step_rolls_back_lowers_the_lr_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = tiny_recipe(&data, 30);
    recipe.main.schedule = contrai_recipe::Decay::Constant;
    recipe.main.warmup = 0.0;
    let mut opts = Options::new(recipe, &run);
    opts.inject_nonfinite_at = Some(13);
    let out = train(&opts, &Silent, &Collect::default()).unwrap();
    assert!(out.finished);
    let d = decisions(&run);
    let rb = d
        .iter()
        .find(|d| d["kind"] == "rollback_nonfinite")
        .expect("a rollback decision");
    assert_eq!(rb["step"], 13);
    assert_eq!(rb["evidence"]["train_loss"], "NaN");
    let m = rows(&run.join("metrics.jsonl"));
    let steps: Vec<u64> = m
        .iter()
        .filter(|r| r.get("train_loss").is_some())
        .map(|r| r["step"].as_u64().unwrap())
        .collect();
    assert_eq!(
        steps,
        (1..=30).collect::<Vec<_>>(),
        "each step once, the failed one retried"
    );
    for r in m.iter().filter(|r| r.get("train_loss").is_some()) {
        assert!(r["train_loss"].as_f64().is_some_and(f64::is_finite), "{r}");
        let lr = r["lr"].as_f64().unwrap();
        // Rolled back to the checkpoint of step 10: steps 11.. retried at half the LR.
        let want = if r["step"].as_u64().unwrap() > 10 {
            1e-3
        } else {
            2e-3
        };
        assert!((lr - want).abs() < 1e-12, "{r}");
    }
    assert!(out.eval.unwrap().holdout_accuracy > 0.6);
}

#[test]
fn label_noise_that_overfits_ends_main_early_at_the_best_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let data = noisy_file(tmp.path(), 200, 0.4);
    let run = tmp.path().join("run");
    let mut recipe = tiny_recipe(&data, 600);
    recipe.model.dropout = 0.0;
    recipe.model.d_model = 64;
    recipe.model.ffn = 128;
    recipe.main.lr = 3e-3;
    recipe.main.schedule = contrai_recipe::Decay::Constant;
    recipe.main.weight_decay = 0.0;
    recipe.run.eval_every = 10;
    recipe.run.checkpoint_every = 10;
    recipe.guards.overfit_patience = 60;
    let out = train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap();
    let e = out.eval.unwrap();
    eprintln!("overfit run: {:?}, best {:?}", kinds(&run), e.best);
    let (end, why) = e.main_end.clone().unwrap();
    assert_eq!(why, "end_main_overfitting", "{:?}", kinds(&run));
    assert!(end < 600, "main ended at {end}");
    let d = decisions(&run)
        .into_iter()
        .find(|d| d["kind"] == "end_main_overfitting")
        .unwrap();
    assert!(d["reason"].as_str().unwrap().contains("best checkpoint"));
    // The best checkpoint's weights were restored: validation is back at its best.
    let (best_step, best_val) = e.best.unwrap();
    assert!(best_step < end);
    assert!(
        (e.val_loss - best_val).abs() < 1e-6,
        "final val {} vs best {best_val}",
        e.val_loss
    );
}

/// The step at which the stability rule (relative change < delta at `needed` checkpoints in a
/// row) first holds, recomputed from metrics.jsonl.
fn first_stable_step(m: &[Value], delta: f64, needed: u32) -> Option<u64> {
    let vals: Vec<(u64, f64)> = m
        .iter()
        .filter(|r| r["phase"] == "main" && r.get("val_loss").is_some())
        .map(|r| (r["step"].as_u64().unwrap(), r["val_loss"].as_f64().unwrap()))
        .collect();
    let mut run = 0;
    for w in vals.windows(2) {
        let change = (w[1].1 - w[0].1).abs() / w[0].1;
        run = if change < delta { run + 1 } else { 0 };
        if run >= needed {
            return Some(w[1].0);
        }
    }
    None
}

#[test]
fn a_stable_main_enters_contract_at_the_first_step_the_rule_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = lifecycle_recipe(&data, 200);
    recipe.contract.stable_delta = 0.05;
    // A calm run: a lower LR, so that validation settles instead of jumping between checkpoints.
    recipe.main.lr = 5e-4;
    let out = train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap();
    let m = rows(&run.join("metrics.jsonl"));
    let want = first_stable_step(&m, 0.05, 2).expect("the planted run stabilises");
    eprintln!("stable at step {want}: {:?}", kinds(&run));
    let e = out.eval.unwrap();
    assert_eq!(e.main_end, Some((want, "main_stable".to_string())));
    let enter = decisions(&run)
        .into_iter()
        .find(|d| d["kind"] == "enter_contract")
        .unwrap();
    assert_eq!(enter["step"], want);
    let stable = decisions(&run)
        .into_iter()
        .find(|d| d["kind"] == "main_stable")
        .unwrap();
    assert_eq!(stable["evidence"]["steps_saved"], 30 + 200 - want);
    assert!(out.step < e.planned_steps, "ending early saves steps");
}

#[test]
fn a_contraction_that_hurts_validation_rolls_back_to_the_best_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let data = noisy_file(tmp.path(), 200, 0.4);
    let run = tmp.path().join("run");
    // Main stops early on a generous stability rule; contraction then keeps a high LR on noisy
    // labels with dropout off: memorising them worsens validation.
    let mut recipe = lifecycle_recipe(&data, 300);
    recipe.model.dropout = 0.0;
    recipe.model.d_model = 64;
    recipe.model.ffn = 128;
    recipe.main.lr = 3e-3;
    recipe.main.min_lr = 3e-3;
    recipe.main.schedule = contrai_recipe::Decay::Constant;
    recipe.main.weight_decay = 0.0;
    recipe.contract.stable_delta = 0.5;
    recipe.contract.stable_checkpoints = 1;
    recipe.contract.budget = 0.3;
    recipe.contract.drop_noisiest = 0.0;
    recipe.guards.overfit_patience = 10_000;
    let planned = contrai_lifecycle::PhaseSteps::new(&recipe);
    let out = train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap();
    let k = kinds(&run);
    eprintln!("hurting contraction: {k:?}");
    let rb = decisions(&run)
        .into_iter()
        .find(|d| d["kind"] == "rollback_contract");
    let rb = rb.unwrap_or_else(|| panic!("no rollback in {k:?}"));
    assert!(out.finished);
    // The contraction's best checkpoint: the lowest validation loss from its entry (measured on
    // entering) to the rollback.
    let at = rb["step"].as_u64().unwrap();
    let enter = decisions(&run)
        .into_iter()
        .find(|d| d["kind"] == "enter_contract")
        .unwrap();
    let entry = (
        enter["step"].as_u64().unwrap(),
        enter["evidence"]["val_loss"].as_f64().unwrap(),
    );
    let best_step = rows(&run.join("metrics.jsonl"))
        .iter()
        .filter(|r| r["phase"] == "contract" && r.get("val_loss").is_some())
        .filter(|r| r["step"].as_u64().unwrap() <= at)
        .map(|r| (r["step"].as_u64().unwrap(), r["val_loss"].as_f64().unwrap()))
        .fold(entry, |b, x| if x.1 < b.1 { x } else { b })
        .0;
    assert_eq!(rb["evidence"]["best_step"], best_step);
    assert!(rb["evidence"]["evaluations_worse"].as_u64().unwrap() >= 3);
    let after = k.iter().position(|x| x == "rollback_contract").unwrap();
    assert_eq!(
        k[after + 1],
        "enter_refine",
        "contraction ends, refine follows: {k:?}"
    );
    // Its unspent steps go to the final anneal: the budget still trains the restored model.
    let unspent = entry.0 + enter["evidence"]["steps"].as_u64().unwrap() - at;
    assert!(unspent > 0, "rolled back before the contraction's end");
    let refine = decisions(&run)
        .into_iter()
        .find(|d| d["kind"] == "enter_refine")
        .unwrap();
    assert_eq!(
        refine["evidence"]["steps"].as_u64(),
        Some(planned.refine + unspent)
    );
    // plan.json was re-planned when refine started: its steps and LR as the run took them.
    let plan: Value = serde_json::from_slice(&std::fs::read(run.join("plan.json")).unwrap()).unwrap();
    let phase = |name: &str| {
        plan["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()
            .clone()
    };
    let (c, r) = (phase("contract"), phase("refine"));
    assert_eq!(r["entered"], true);
    assert_eq!(r["steps"].as_u64(), Some(planned.refine + unspent));
    assert_eq!(r["start_step"], rb["step"]);
    assert_eq!(r["lr"][0]["lr_start"], refine["evidence"]["lr_start"]);
    assert_eq!(
        c["steps"].as_u64(),
        Some(at - entry.0),
        "the contraction's steps as run"
    );
    // The masks went back with the weights, and the sparsity series says so.
    let last = rows(&run.join("metrics.jsonl"))
        .into_iter()
        .rfind(|r| r.get("sparsity").is_some())
        .unwrap();
    let e = out.eval.unwrap();
    for (m, s) in &e.sparsity {
        assert_eq!(last[format!("sparsity/{m}")].as_f64(), Some(*s), "{m}: {last}");
    }
}

#[test]
fn a_contract_batch_below_half_of_main_is_refused_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = lifecycle_recipe(&data, 20);
    recipe.main.batch = 32;
    recipe.contract.batch = 8;
    let err = train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap_err();
    assert!(matches!(err, TrainError::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("below half of main.batch = 32"), "{err}");
    assert!(!run.join("metrics.jsonl").exists(), "nothing was trained");
}

#[test]
fn a_pipeline_that_cannot_learn_fails_validate_before_main() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = lifecycle_recipe(&data, 20);
    recipe.validate.lr = 1e-7;
    let err = train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap_err();
    assert!(matches!(err, TrainError::ValidateFailed(_)), "{err}");
    assert!(
        err.to_string()
            .contains("did not move the loss of one batch of 8 beyond its own noise"),
        "{err}"
    );
    let m = rows(&run.join("metrics.jsonl"));
    assert!(
        m.iter().all(|r| r["phase"] == "validate"),
        "no main step was spent"
    );
    assert_eq!(kinds(&run), ["validate_failed"]);
    assert!(!run.join("checkpoints").exists());
}

#[test]
fn no_sample_is_dropped_as_noisy_when_none_is_above_the_loss_floor() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = forced_contract(lifecycle_recipe(&data, 40));
    recipe.contract.noisy_loss = 50.0; // no sample's loss is that high
    recipe.refine.distill.enabled = false;
    train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap();
    let d = decisions(&run);
    let drops: Vec<&Value> = d.iter().filter(|d| d["kind"] == "drop_noisiest").collect();
    assert_eq!(drops.len(), 1, "looked for once, not again on entering refine");
    assert_eq!(drops[0]["evidence"]["count"], 0);
    let train_rows =
        |kind: &str| d.iter().find(|d| d["kind"] == kind).unwrap()["evidence"]["train_samples"].as_u64();
    let all = std::fs::read_to_string(run.join("data/train.jsonl"))
        .unwrap()
        .lines()
        .count() as u64;
    assert_eq!(
        train_rows("enter_contract"),
        Some(all),
        "contract trains on every sample"
    );
    assert_eq!(train_rows("enter_refine"), Some(all));
}
