//! The conductor driven by synthetic observation streams — no tensors, no engine: the simulated
//! engine of `curve_engine.rs` answers each request from curves, and the tests read what the
//! conductor decided and asked for.

use contrai_lifecycle::sensitivity::{MIN_SCAN_SAMPLES, Scan};
use contrai_lifecycle::{Action, Conductor, Request, RestorePoint, RestoreScope, RunInfo, State, Task, Turn};
use contrai_recipe::{Phase, Quantizations, Quantize, Recipe};
use contrai_run::{DecisionKind, MetricsRow};
use contrai_testkit::engine::Simulated;

use crate::curve_engine::{Curve, Sim, falling, hurt_by_contraction, info, recipe, settles, simulate};

#[test]
fn a_stable_main_enters_contraction_early_and_runs_every_phase() {
    let sim = simulate(recipe(), falling(), settles(), Vec::new());
    assert_eq!(sim.end, Some(Ok(())));
    let stable = sim.decision(DecisionKind::MainStable);
    // Checkpoints at 43, 53, 63: val 0.30 at 53 and 63, both within 2 % of the one before.
    assert_eq!(stable.step, 63, "{:?}", sim.kinds());
    let enter = sim.decision(DecisionKind::EnterContract);
    assert_eq!(enter.step, 63, "contraction starts where main ended");
    assert_eq!(stable.evidence["steps_saved"], 103 - 63);
    let kinds = sim.kinds();
    let order: Vec<DecisionKind> = [
        DecisionKind::ValidatePassed,
        DecisionKind::CheckpointRoundTrip,
        DecisionKind::MainStable,
        DecisionKind::Doctor,
        DecisionKind::Sensitivity,
        DecisionKind::DropNoisiest,
        DecisionKind::EnterContract,
        DecisionKind::EnterRefine,
        DecisionKind::Distill,
        DecisionKind::Int8,
        DecisionKind::Holdout,
    ]
    .into();
    let seen: Vec<DecisionKind> = kinds.iter().copied().filter(|k| order.contains(k)).collect();
    assert_eq!(seen, order);
    // Contract anneals linearly from main's last LR with no warmup, and falls every step.
    let lrs = sim.lrs();
    let main_last = lrs.iter().rfind(|l| l.1 == Phase::Main).unwrap().2;
    let contract: Vec<f64> = lrs
        .iter()
        .filter(|l| l.1 == Phase::Contract)
        .map(|l| l.2)
        .collect();
    assert_eq!(
        contract[0], main_last,
        "no warmup: the first contract step runs at main's last LR"
    );
    assert!(contract.windows(2).all(|w| w[1] < w[0]), "{contract:?}");
    // Of the 3 samples above ln 2, the share's 2 are dropped, once, named by id.
    let drop = sim.decision(DecisionKind::DropNoisiest);
    assert_eq!(
        drop.evidence["ids"],
        serde_json::json!(["s0", "s1"]),
        "at most 2 % of 100"
    );
    assert_eq!(drop.evidence["above_floor"], 3);
    let drops = sim
        .turns
        .iter()
        .flat_map(|t| &t.actions)
        .filter(|a| matches!(a, Action::DropSamples { .. }))
        .count();
    assert_eq!(drops, 1);
}

#[test]
fn the_sensitivity_scan_is_sized_from_mains_samples_and_judged_on_its_own_base() {
    let mut sim = simulate(recipe(), falling(), settles(), Vec::new());
    let asked = sim
        .turns
        .iter()
        .find_map(|t| match &t.request {
            Request::MeasureSensitivity {
                modules,
                samples,
                stop_above,
                ..
            } => Some((modules.len(), *samples, *stop_above)),
            _ => None,
        })
        .unwrap();
    // Main ran steps 3 → 63 with batch 32: 1,920 samples, 5,760 passes; 15 % of them over the
    // unpruned loss and 4 levels of each module.
    let (modules, samples, stop_above) = asked;
    let evaluations = 1 + 4 * modules;
    let plan = contrai_lifecycle::sensitivity::plan(1920, evaluations);
    assert!(matches!(plan, Scan::Measured { .. }), "{plan:?}");
    assert_eq!(samples, Some(plan.samples()));
    assert_eq!(stop_above, Some(recipe().contract.tolerance));
    let d = sim.decision(DecisionKind::Sensitivity);
    assert_eq!(d.evidence["scan_samples"], serde_json::json!(samples));
    assert_eq!(
        d.evidence["scan_base_val_loss"], d.evidence["base_val_loss"],
        "the whole set's"
    );
    // An engine that measured on a subsample gives its own unpruned loss: increases are against it.
    sim = Sim::new(falling(), settles());
    sim.scan_base = Some(0.2);
    sim.run_from_start(recipe());
    let d = sim.decision(DecisionKind::Sensitivity);
    assert_eq!(d.evidence["scan_base_val_loss"].as_f64().unwrap() as f32, 0.2);
    let first = &d.evidence["sensitivity"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()[0];
    let want = (0.3 + 0.01 * 0.1f32 - 0.2) as f64 / 0.2;
    assert!(
        (first["increase"].as_f64().unwrap() - want).abs() < 1e-6,
        "{first}"
    );
}

#[test]
fn a_main_too_short_to_pay_for_measuring_gets_a_linearized_scan_and_joint_checks_on_its_samples() {
    let mut r = recipe();
    r.main.batch = 4;
    let mut sim = Sim::new(falling(), settles());
    sim.scan_base = Some(0.25);
    sim.run_from_start(r);
    // Main ran 60 steps of 4: 240 samples, 720 passes, 108 for the scan: too few for a measured
    // scan's floor of 32 samples an evaluation; linearized, 108 / 8 = 13, the floor.
    let diagnose: Vec<&Request> = sim
        .turns
        .iter()
        .map(|t| &t.request)
        .skip_while(|r| !matches!(r, Request::MeasureSensitivity { .. }))
        .take_while(|r| {
            matches!(
                r,
                Request::MeasureSensitivity { .. } | Request::MeasureJoint { .. }
            )
        })
        .collect();
    let Some(Request::MeasureSensitivity {
        samples, linearized, ..
    }) = diagnose.first()
    else {
        panic!("{diagnose:?}")
    };
    assert!(*linearized);
    assert_eq!(*samples, Some(MIN_SCAN_SAMPLES));
    assert!(diagnose[1..].iter().all(|r| matches!(
        r,
        Request::MeasureJoint {
            samples: Some(MIN_SCAN_SAMPLES),
            ..
        }
    )));
    // The whole set is not evaluated in diagnose: the scan's samples stand for it.
    assert!(!sim.turns.iter().any(|t| matches!(
        t.request,
        Request::Evaluate {
            record: Some(Phase::Diagnose)
        }
    )));
    let d = sim.decision(DecisionKind::Sensitivity);
    assert_eq!(d.evidence["scan"], "linearized");
    assert_eq!(d.evidence["base_val_loss"].as_f64().unwrap() as f32, 0.25);
    assert!(
        d.reason
            .contains("estimated from 32 validation samples' logit gradients"),
        "{}",
        d.reason
    );
}

#[test]
fn a_still_falling_main_skips_contraction_with_the_reason() {
    let val: Curve = Box::new(|s, _| 0.7 * 0.9f32.powf(s as f32 / 10.0));
    let sim = simulate(recipe(), falling(), val, Vec::new());
    let skip = sim.decision(DecisionKind::SkipContract);
    assert!(skip.reason.contains("main never stabilised"), "{}", skip.reason);
    assert_eq!(skip.evidence["ever_stable"], false);
    let kinds = sim.kinds();
    assert!(!kinds.contains(&DecisionKind::EnterContract), "{kinds:?}");
    assert!(kinds.contains(&DecisionKind::EnterRefine));
    assert!(kinds.contains(&DecisionKind::MainComplete));
}

#[test]
fn a_nan_restores_the_last_checkpoint_with_the_lr_halved_three_times_then_stops() {
    let mut r = recipe();
    r.main.schedule = contrai_recipe::Decay::Constant;
    r.main.warmup = 0.0;
    // Step 18 is never finite: three rollbacks to the checkpoint of step 13, then the run stops.
    let sim = simulate(r, falling(), settles(), vec![18]);
    let kinds = sim.kinds();
    let rollbacks = kinds
        .iter()
        .filter(|k| **k == DecisionKind::RollbackNonfinite)
        .count();
    assert_eq!(rollbacks, 3, "{kinds:?}");
    assert_eq!(kinds.last(), Some(&DecisionKind::AbortNonfinite));
    assert!(
        matches!(&sim.end, Some(Err(e)) if e.contains("Diverged")),
        "{:?}",
        sim.end
    );
    // Each retry of step 14 runs at half the LR of the one before.
    let lr14: Vec<f64> = sim.lrs().iter().filter(|l| l.0 == 14).map(|l| l.2).collect();
    assert_eq!(lr14.len(), 4, "once, then three retries: {lr14:?}");
    for w in lr14.windows(2) {
        assert!((w[1] - w[0] * 0.5).abs() < 1e-15, "{lr14:?}");
    }
    for t in &sim.turns {
        if let Request::Restore { to, scope } = &t.request {
            assert_eq!((*to, *scope), (RestorePoint::Latest, RestoreScope::Everything));
        }
    }
}

#[test]
fn a_nan_evaluation_in_main_or_contraction_is_rolled_back_like_a_nan_step() {
    // Main evaluates at 13, 23, ...; the stable main enters contraction at 63, evaluated every 5.
    for (at, phase) in [(33, Phase::Main), (73, Phase::Contract)] {
        let mut sim = Sim::new(falling(), settles());
        sim.nan_eval_once = vec![at];
        sim.run_from_start(recipe());
        assert_eq!(sim.end, Some(Ok(())), "the run goes on after the rollback");
        let back = sim.decision(DecisionKind::RollbackNonfinite);
        assert_eq!((back.step, back.phase), (at, phase));
        assert!(
            back.reason
                .starts_with("non-finite validation loss (NaN): back to the last good checkpoint"),
            "{}",
            back.reason
        );
        assert_eq!(back.evidence["val_loss"], "NaN");
        let kinds = sim.kinds();
        assert!(!kinds.contains(&DecisionKind::RollbackContract), "{kinds:?}");
        let restores: Vec<_> = sim
            .turns
            .iter()
            .filter_map(|t| match &t.request {
                Request::Restore { to, scope } => Some((*to, *scope)),
                _ => None,
            })
            .collect();
        assert_eq!(restores, [(RestorePoint::Latest, RestoreScope::Everything)]);
        // The steps after the restored checkpoint run again at half the LR.
        let lrs: Vec<f64> = sim.lrs().iter().filter(|l| l.0 == at).map(|l| l.2).collect();
        assert_eq!(lrs.len(), 2, "{lrs:?}");
        assert!((lrs[1] - lrs[0] * 0.5).abs() < 1e-15, "{lrs:?}");
    }
}

#[test]
fn a_worsening_contraction_rolls_back_to_its_best_and_refine_gets_the_unspent_steps() {
    // Main settles; contraction then makes validation worse at every evaluation.
    let r = recipe();
    let planned = contrai_lifecycle::PhaseSteps::new(&r);
    let sim = simulate(r, falling(), hurt_by_contraction(), Vec::new());
    let rb = sim.decision(DecisionKind::RollbackContract);
    let enter = sim.decision(DecisionKind::EnterContract);
    assert_eq!(
        rb.evidence["best_step"], enter.step,
        "the entry is the contraction's best"
    );
    assert_eq!(
        rb.step,
        enter.step + 15,
        "three evaluations (every 5 steps) beyond 2 %"
    );
    let restore = sim
        .turns
        .iter()
        .find_map(|t| match &t.request {
            Request::Restore { to, scope } => Some((*to, *scope)),
            _ => None,
        })
        .unwrap();
    assert_eq!(restore, (RestorePoint::Step(enter.step), RestoreScope::Weights));
    let refine = sim.decision(DecisionKind::EnterRefine);
    let unspent = enter.step + planned.contract - rb.step;
    assert_eq!(refine.evidence["steps"], planned.refine + unspent);
    assert_eq!(refine.step, rb.step);
}

#[test]
fn overfitting_in_main_ends_it_and_restores_the_best_checkpoint() {
    // Validation bottoms out at step 40 and climbs 5 % an evaluation while training falls.
    let val: Curve = Box::new(|s, _| {
        if s <= 43 {
            0.7 - 0.009 * s as f32
        } else {
            0.313 * 1.05f32.powf((s as f32 - 43.0) / 10.0)
        }
    });
    let sim = simulate(recipe(), falling(), val, Vec::new());
    let end = sim.decision(DecisionKind::EndMainOverfitting);
    assert!(
        end.reason.contains("best checkpoint is restored"),
        "{}",
        end.reason
    );
    let best = sim
        .turns
        .iter()
        .find_map(|t| match &t.request {
            Request::Restore {
                to: RestorePoint::Step(s),
                scope: RestoreScope::Weights,
            } => Some(*s),
            _ => None,
        })
        .expect("the best checkpoint is restored");
    assert_eq!(best, 43, "the lowest validation loss at a checkpoint");
    assert!(end.step > best);
    let enter = sim.decision(DecisionKind::EnterContract);
    assert_eq!(enter.step, end.step, "an early end always contracts");
}

#[test]
fn every_action_carries_its_evidence() {
    let sim = simulate(recipe(), falling(), hurt_by_contraction(), vec![20]);
    for d in sim.decisions() {
        assert!(!d.reason.is_empty(), "{d:?}");
        assert!(d.evidence.as_object().is_some_and(|o| !o.is_empty()), "{d:?}");
    }
    let explains = |t: &Turn, kinds: &[DecisionKind]| {
        t.actions
            .iter()
            .any(|a| matches!(a, Action::Record(d) if kinds.contains(&d.kind)))
    };
    for t in &sim.turns {
        if matches!(t.request, Request::Restore { .. }) {
            let why = [
                DecisionKind::RollbackNonfinite,
                DecisionKind::RollbackContract,
                DecisionKind::EndMainOverfitting,
            ];
            assert!(explains(t, &why), "a restore without its reason: {t:?}");
        }
        for a in &t.actions {
            match a {
                Action::DropSamples { .. } => assert!(explains(t, &[DecisionKind::DropNoisiest]), "{t:?}"),
                Action::SetPhase {
                    phase: Phase::Contract,
                    restart_order: true,
                } => {
                    assert!(explains(t, &[DecisionKind::EnterContract]), "{t:?}")
                }
                Action::SetPhase {
                    phase: Phase::Refine,
                    restart_order: true,
                } => {
                    assert!(explains(t, &[DecisionKind::EnterRefine]), "{t:?}")
                }
                _ => {}
            }
        }
    }
    assert!(sim.kinds().contains(&DecisionKind::RollbackNonfinite));
}

#[test]
fn the_state_round_trips_through_serde_mid_phase_and_the_run_continues_alike() {
    let whole = simulate(recipe(), falling(), hurt_by_contraction(), Vec::new());
    let contract_start = whole.decision(DecisionKind::EnterContract).step;
    // Resume from each checkpoint: one mid-main, one mid-contraction.
    for at in [33, contract_start + 5] {
        let (state, rows) = whole.checkpoints.get(&at).cloned().unwrap_or_else(|| {
            let have: Vec<u64> = whole.checkpoints.keys().copied().collect();
            panic!("no checkpoint at {at}: {have:?}")
        });
        let json = serde_json::to_string(&state).unwrap();
        let back: State = serde_json::from_str(&json).unwrap();
        assert_eq!(back, state);
        let history = whole_history(&whole, rows);
        let mut sim = Sim::new(falling(), hurt_by_contraction());
        sim.step = at;
        sim.history = history.clone();
        sim.checkpoints = whole
            .checkpoints
            .range(..=at)
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        sim.sparsity = state.sparsity.clone();
        let mut c = Conductor::resume(recipe(), info(), back, &history).unwrap();
        let first = c.begin().unwrap();
        sim.run(&mut c, first);
        // The uninterrupted run's turns after the checkpoint's turn, and the resumed run's after
        // its first (which restates the phase's settings), are the same.
        let after = whole
            .turns
            .iter()
            .position(|t| {
                t.actions
                    .iter()
                    .any(|a| matches!(a, Action::Checkpoint { state, .. } if state.step == at))
            })
            .unwrap();
        assert_eq!(
            whole.turns[after].request, sim.turns[0].request,
            "the same next step"
        );
        let (a, b) = (&whole.turns[after + 1..], &sim.turns[1..]);
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert_eq!(x, y, "resumed at {at}: turn {i} after the resume differs");
        }
        assert_eq!(a.len(), b.len(), "resumed at {at}: as many turns");
    }
}

/// The rows a checkpoint recorded (`rows` of them).
fn whole_history(sim: &Sim, rows: usize) -> Vec<MetricsRow> {
    sim.history[..rows].to_vec()
}

#[test]
fn the_plan_says_whether_the_job_recomputes_activations_when_the_engine_knows() {
    let plan = |recipe: bool, job: Option<bool>| {
        let mut r = Recipe::default();
        r.model.gradient_checkpointing = recipe;
        let info = RunInfo {
            gradient_checkpointing: job,
            ..info()
        };
        Conductor::new(r, info).plan().plan.gradient_checkpointing
    };
    assert!(plan(false, Some(true)), "the job's own checkpointing");
    assert!(!plan(true, Some(false)), "what runs, whatever the recipe asked");
    assert!(plan(true, None) && !plan(false, None), "unknown: the recipe's");
}

#[test]
fn a_recipe_that_leaves_main_steps_to_the_job_is_laid_on_its_budget() {
    let job = RunInfo {
        job_steps: Some(400),
        ..info()
    };
    let mut c = Conductor::new(Recipe::default(), job);
    let s = c.phase_steps();
    assert_eq!((s.main, s.contract, s.refine, s.training()), (300, 80, 20, 400));
    assert_eq!(c.recipe().main.steps, 300, "the recipe in force says it");
    let turn = c.begin().unwrap();
    let laid = turn
        .actions
        .iter()
        .find_map(|a| match a {
            Action::Record(d) if d.kind == DecisionKind::PlanFromJob => Some(d),
            _ => None,
        })
        .expect("the first turn records how the plan was laid");
    assert_eq!(laid.evidence["job_steps"], 400);
    assert!(
        laid.reason
            .contains("400 optimizer steps hold main 300, contract 80 and refine 20"),
        "{}",
        laid.reason
    );
    // Without a job budget the recipe's own steps stand, and nothing is recorded.
    let mut plain = Conductor::new(Recipe::default(), info());
    assert_eq!(plain.phase_steps().training(), 533);
    let first = plain.begin().unwrap();
    assert!(
        !first
            .actions
            .iter()
            .any(|a| matches!(a, Action::Record(d) if d.kind == DecisionKind::PlanFromJob))
    );
}

#[test]
fn each_quantized_variant_is_judged_on_its_own_a_language_model_s_by_perplexity() {
    let mut r = recipe();
    r.refine.quantize = Quantizations::new([Quantize::Int8, Quantize::Int4]);
    r.refine.max_drop = 2.0;
    r.refine.distill.enabled = false;
    let mut sim = Sim::new(falling(), settles());
    let lm = RunInfo {
        task: Task::LanguageModel,
        ..info()
    };
    sim.run_with(r.clone(), lm);
    assert_eq!(sim.end, Some(Ok(())));
    // int8: the loss 0.300 → 0.303 is perplexity +0.3 %: kept; int4: 0.3 → 0.4 is +10.5 %: refused.
    let asked: Vec<Quantize> = sim
        .turns
        .iter()
        .filter_map(|t| match t.request {
            Request::Quantize { to, .. } => Some(to),
            _ => None,
        })
        .collect();
    assert_eq!(asked, [Quantize::Int8, Quantize::Int4]);
    let int8 = sim.decision(DecisionKind::Int8);
    assert!(
        int8.reason
            .contains("validation perplexity 1.35 → 1.35 (+0.30 %, limit +2 %)"),
        "{}",
        int8.reason
    );
    let int4 = sim.decision(DecisionKind::RefuseInt4);
    assert!(
        int4.reason
            .starts_with("int4 (int8): validation perplexity 1.35 → 1.49 (+10.52 %"),
        "{}",
        int4.reason
    );
    assert_eq!(int4.evidence["measure"], "perplexity");
    let holdout = sim.decision(DecisionKind::Holdout);
    assert!(
        holdout.reason.contains("perplexity 1.36 on 20 samples"),
        "{}",
        holdout.reason
    );
    let Some(Request::Finish(summary)) = sim.turns.last().map(|t| &t.request) else {
        panic!("the run finishes")
    };
    let (q8, q4) = (summary.int8.as_ref().unwrap(), summary.int4.as_ref().unwrap());
    assert!(q8.kept && !q4.kept);
    assert!((q4.holdout_perplexity.unwrap() - 0.32f64.exp()).abs() < 1e-6);
    // A classifier's variants by accuracy points: 0.9 → 0.895 is 0.5 points, both kept.
    let mut sim = Sim::new(falling(), settles());
    sim.run_with(r.clone(), info());
    assert!(sim.kinds().contains(&DecisionKind::Int4));
    assert!(
        !sim.decision(DecisionKind::Int4)
            .evidence
            .as_object()
            .unwrap()
            .contains_key("measure")
    );
}

#[test]
fn a_variant_the_engine_declines_is_recorded_and_the_others_still_judged() {
    let mut r = recipe();
    r.refine.quantize = Quantizations::new([Quantize::Int4, Quantize::Int8]);
    let mut sim = Sim::new(falling(), settles());
    sim.declines = Some(Quantize::Int4);
    sim.run_from_start(r);
    assert_eq!(sim.end, Some(Ok(())));
    let declined = sim.decision(DecisionKind::EngineSubstitute);
    assert!(
        declined
            .reason
            .starts_with("quantize the final model to int4: this engine has no such codes")
    );
    let kinds = sim.kinds();
    assert!(
        kinds.contains(&DecisionKind::Int8) && !kinds.contains(&DecisionKind::Int4),
        "{kinds:?}"
    );
    let Some(Request::Finish(summary)) = sim.turns.last().map(|t| &t.request) else {
        panic!("the run finishes")
    };
    assert!(summary.int8.is_some() && summary.int4.is_none());
}

#[test]
fn adapters_are_merged_when_main_ends_and_again_after_a_rollback_past_it() {
    // A NaN at step 70, in contraction (main ends at 63): each retry restores a checkpoint.
    let sim = simulate(recipe(), falling(), settles(), vec![70]);
    let merges = |t: &Turn| t.actions.contains(&Action::MergeAdapters);
    let first = sim.turns.iter().position(merges).expect("merged once main ended");
    let doctor = |t: &Turn| {
        t.actions
            .iter()
            .any(|a| matches!(a, Action::Record(d) if d.kind == DecisionKind::Doctor))
    };
    assert!(
        doctor(&sim.turns[first]),
        "diagnose's first turn merges: {:?}",
        sim.turns[first]
    );
    for t in &sim.turns {
        for a in &t.actions {
            if let Action::SetPhase { phase, .. } = a {
                assert_eq!(merges(t), *phase > Phase::Main, "{t:?}");
            }
        }
    }
    let rollback = sim
        .turns
        .iter()
        .position(|t| {
            matches!(
                t.request,
                Request::Restore {
                    scope: RestoreScope::Everything,
                    ..
                }
            )
        })
        .expect("the NaN rolled back");
    assert!(rollback > first);
    assert!(merges(&sim.turns[rollback + 1]), "{:?}", sim.turns[rollback + 1]);
}
