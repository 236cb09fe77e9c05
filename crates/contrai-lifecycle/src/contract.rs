//! The contraction's settings and guards: the batch and dropout of each phase, the noisy-sample
//! policy, the guard that rolls a hurting contraction back, and the divergence rule that stops
//! pruning a module. (Pruning's schedule and caps are in [`crate::prune_policy`].)

use std::collections::BTreeMap;

use contrai_recipe::{Phase, Recipe};
use contrai_run::{Decision, DecisionKind};
use serde_json::json;

use crate::lr_schedule::PhaseLr;
use crate::state::{Contraction, State};

/// A phase's micro-batch and dropout multiplier: main's batch and the model's dropout in
/// validate and main; `contract.batch` (never below half of main's) and dropout ×
/// `contract.dropout_scale` in contract and refine.
pub fn phase_settings(phase: Phase, recipe: &Recipe) -> (usize, f64) {
    match phase {
        Phase::Contract | Phase::Refine => (recipe.contract.batch, recipe.contract.dropout_scale),
        _ => (recipe.main.batch, 1.0),
    }
}

/// Whether a LoRA job's adapters are merged into the weights they adapt in this phase: from
/// the first phase after main on — diagnose measures, and contraction prunes and trains, dense
/// matrices. A rollback to one of main's checkpoints splits them again; the phase's settings
/// merge them once more.
pub fn adapters_merged(phase: Phase) -> bool {
    phase > Phase::Main
}

/// The noisy-sample policy: rank the training samples by loss and drop at most
/// `contract.drop_noisiest` of them, only those above `contract.noisy_loss` (the model gives
/// their label poor odds) — on clean, well-fitted data the top 2 % by loss are hard examples,
/// not noise. Returns the dropped rows, sorted, and the decision naming them by id.
pub fn noisy(
    losses: &[f32],
    ids: &[String],
    step: u64,
    phase: Phase,
    recipe: &Recipe,
) -> (Vec<usize>, Decision) {
    let c = &recipe.contract;
    let (share, floor) = (c.drop_noisiest, c.noisy_loss);
    let mut order: Vec<usize> = (0..losses.len()).collect();
    order.sort_by(|&a, &b| losses[b].total_cmp(&losses[a]).then(a.cmp(&b)));
    let n = order
        .iter()
        .take(((losses.len() as f64) * share).round() as usize)
        .take_while(|&&i| f64::from(losses[i]) > floor)
        .count();
    let mut dropped: Vec<usize> = order[..n].to_vec();
    dropped.sort_unstable();
    let named: Vec<&str> = dropped
        .iter()
        .map(|&i| ids.get(i).map_or("?", String::as_str))
        .collect();
    let cutoff = n.checked_sub(1).map(|k| losses[order[k]]);
    let above = losses.iter().filter(|l| f64::from(**l) > floor).count();
    let reason = format!(
        "dropped the {n} training samples ({:.1} %, at most {:.1} %) with the highest loss, all above {floor:.3} ({above} samples are), from contract and refine",
        100.0 * n as f64 / losses.len().max(1) as f64,
        100.0 * share
    );
    let evidence = json!({"count": n, "share": share, "noisy_loss": floor, "above_floor": above,
                          "loss_cutoff": cutoff, "ids": named});
    (
        dropped,
        Decision::new(step, phase, DecisionKind::DropNoisiest, reason, evidence),
    )
}

/// The decision of entering contract or refine, with its steps, LR, batch and dropout.
pub fn entry_decision(state: &State, recipe: &Recipe, train_samples: usize, val_loss: f32) -> Decision {
    let phase = state.phase;
    let seg = state.segment;
    let lr_end = match PhaseLr::new(phase, recipe, seg.steps, seg.lr0) {
        PhaseLr::Anneal { to, .. } => to,
        other => other.at(seg.steps.saturating_sub(1)),
    };
    let purpose = match phase {
        Phase::Contract => {
            "contract: LR annealed linearly with no warmup, smaller batch, dropout scaled, noisiest samples out; rolled back if validation worsens"
        }
        _ => "refine: a short linear anneal on the filtered data, then the single holdout evaluation",
    };
    let (batch, dropout_scale) = phase_settings(phase, recipe);
    let batch = batch * recipe.main.accumulate;
    let c = &recipe.contract;
    let (steps, lr0) = (seg.steps, seg.lr0);
    Decision::new(
        state.step,
        phase,
        DecisionKind::enter(phase).unwrap_or(DecisionKind::EnterRefine),
        format!(
            "{purpose}; {steps} steps, LR {lr0:.2e} → {lr_end:.2e}, batch {batch}, dropout × {dropout_scale}"
        ),
        json!({"steps": steps, "lr_start": lr0, "lr_end": lr_end, "batch": batch, "val_loss": val_loss,
               "prune": !c.prune.is_empty() && phase == Phase::Contract,
               "dropout": recipe.model.dropout * dropout_scale,
               "train_samples": train_samples - state.contraction.dropped.len()}),
    )
}

/// The contraction guard at an evaluation: `contract.patience` evaluations in a row worse than
/// the best validation loss since contraction began by more than `contract.tolerance` roll
/// back to that best point's checkpoint (the contraction is what is undone, not main).
pub fn guard(c: &mut Contraction, step: u64, val: f32, recipe: &Recipe) -> Option<Decision> {
    let r = &recipe.contract;
    let (best_step, reference) = c.best.unwrap_or((step, val));
    if val < reference {
        c.best = Some((step, val));
    }
    let worse = f64::from(val) > f64::from(reference) * (1.0 + r.tolerance);
    c.worse_run = if worse { c.worse_run + 1 } else { 0 };
    if c.worse_run < r.patience {
        return None;
    }
    Some(Decision::new(
        step,
        Phase::Contract,
        DecisionKind::RollbackContract,
        format!(
            "validation loss {val:.4} is more than {:.0} % above the contraction's best {reference:.4} (step {best_step}) for {} evaluations: the contraction hurts generalisation; back to that checkpoint, contraction ends",
            100.0 * r.tolerance,
            c.worse_run
        ),
        json!({"val_loss": val, "best_val_loss": reference, "best_step": best_step,
               "tolerance": r.tolerance, "evaluations_worse": c.worse_run}),
    ))
}

/// The divergence rule at a contraction evaluation: when the validation − training loss gap
/// has grown by more than `contract.divergence` × the validation loss since contraction
/// began, the modules pruned further since the last evaluation stop being pruned.
pub fn divergence(
    c: &mut Contraction,
    step: u64,
    val: f32,
    sparsity: &BTreeMap<String, f64>,
    recipe: &Recipe,
) -> Option<Decision> {
    let (sum, n) = std::mem::take(&mut c.train_since_eval);
    let before = std::mem::replace(&mut c.sparsity_at_eval, sparsity.clone());
    if n == 0 {
        return None;
    }
    let gap = f64::from(val) - sum / n as f64;
    let gap0 = *c.gap0.get_or_insert(gap);
    let growth = (gap - gap0) / f64::from(val).abs().max(1e-12);
    if growth <= recipe.contract.divergence {
        return None;
    }
    let grown: Vec<String> = sparsity
        .iter()
        .filter(|(m, s)| **s > before.get(*m).copied().unwrap_or(0.0) && !c.frozen.contains(m))
        .map(|(m, _)| m.clone())
        .collect();
    if grown.is_empty() {
        return None;
    }
    c.frozen.extend(grown.iter().cloned());
    Some(Decision::new(
        step,
        Phase::Contract,
        DecisionKind::FreezePruning,
        format!(
            "the validation − training loss gap grew from {gap0:.4} to {gap:.4} ({:.1} % of the validation loss, threshold {:.0} %): {} stop being pruned at their current sparsity",
            100.0 * growth,
            100.0 * recipe.contract.divergence,
            grown.join(", ")
        ),
        json!({"gap": gap, "gap_at_entry": gap0, "growth": growth, "modules": grown}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contraction_rolls_back_after_patience_evaluations_beyond_tolerance() {
        let r = Recipe::default();
        let mut c = Contraction {
            best: Some((300, 0.20)),
            ..Contraction::default()
        };
        assert_eq!(guard(&mut c, 320, 0.203, &r), None, "within 2 %");
        assert_eq!(guard(&mut c, 340, 0.21, &r), None);
        assert_eq!(guard(&mut c, 360, 0.22, &r), None);
        assert_eq!(guard(&mut c, 380, 0.19, &r), None, "recovered: a new reference");
        assert_eq!(guard(&mut c, 400, 0.195, &r), None, "+2.6 % of 0.19");
        assert_eq!(guard(&mut c, 420, 0.195, &r), None);
        let d = guard(&mut c, 440, 0.25, &r).expect("three evaluations worse");
        assert_eq!(d.kind, DecisionKind::RollbackContract);
        assert_eq!(d.evidence["best_step"], 380, "the new reference");
    }

    #[test]
    fn a_growing_gap_freezes_the_modules_pruned_since_the_last_eval() {
        let r = Recipe::default();
        let mut c = Contraction::default();
        let s1: BTreeMap<String, f64> = [("a".to_string(), 0.1), ("b".to_string(), 0.1)].into();
        c.train_since_eval = (0.2 * 10.0, 10);
        assert!(
            divergence(&mut c, 10, 0.30, &s1, &r).is_none(),
            "first eval sets the gap: 0.10"
        );
        let s2: BTreeMap<String, f64> = [("a".to_string(), 0.3), ("b".to_string(), 0.1)].into();
        c.train_since_eval = (0.1 * 10.0, 10);
        let d = divergence(&mut c, 20, 0.30, &s2, &r).expect("gap 0.20: +33 % of val");
        assert_eq!(d.evidence["modules"], json!(["a"]));
        assert_eq!(c.frozen, ["a"]);
    }

    #[test]
    fn only_samples_above_the_loss_floor_are_dropped_at_most_the_share() {
        let r = Recipe::default();
        let ids: Vec<String> = (0..100).map(|i| format!("s{i}")).collect();
        let mut losses = vec![0.1f32; 100];
        for (i, l) in [(3, 5.0), (50, 2.0), (7, 0.9), (9, 0.5)] {
            losses[i] = l;
        }
        let (dropped, d) = noisy(&losses, &ids, 10, Phase::Contract, &r);
        assert_eq!(dropped, [3, 50], "2 % of 100, both above ln 2");
        assert_eq!(d.evidence["ids"], json!(["s3", "s50"]));
        assert_eq!(d.evidence["above_floor"], 3);
        let (none, _) = noisy(&[0.1; 100], &ids, 10, Phase::Contract, &r);
        assert!(none.is_empty(), "clean, well-fitted data: nothing is noise");
    }
}
