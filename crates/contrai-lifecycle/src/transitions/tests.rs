//! Unit tests of `transitions.rs`.

use super::*;

fn main_segment() -> Segment {
    Segment {
        start: 30,
        steps: 400,
        lr0: 5e-4,
    }
}

#[test]
fn main_ends_after_two_stable_checkpoints_in_a_row() {
    let r = Recipe::default();
    let mut st = Stability::default();
    let m = main_segment();
    assert_eq!(stability(&mut st, 80, 0.50, m, &r), None);
    assert_eq!(stability(&mut st, 130, 0.40, m, &r), None, "−20 %");
    assert_eq!(st.improving_run, 2);
    assert!(!force_or_skip(&st, 130, &r).0, "still learning: skip");
    assert_eq!(stability(&mut st, 180, 0.395, m, &r), None, "first stable");
    assert!(st.stabilised);
    assert_eq!(force_or_skip(&st, 180, &r).1.kind, DecisionKind::ForceContract);
    assert_eq!(stability(&mut st, 230, 0.37, m, &r), None, "−6 % resets");
    assert_eq!(stability(&mut st, 280, 0.368, m, &r), None);
    let d = stability(&mut st, 330, 0.366, m, &r).expect("stable twice in a row");
    assert_eq!(d.kind, DecisionKind::MainStable);
    assert_eq!(d.evidence["steps_saved"], 100);
}

#[test]
fn a_plain_run_never_ends_main_on_stability() {
    let mut r = Recipe::default();
    r.run.phases = vec![Phase::Main];
    let mut st = Stability::default();
    for (s, v) in [(50, 0.3), (100, 0.3), (150, 0.3), (200, 0.3)] {
        assert_eq!(stability(&mut st, s, v, main_segment(), &r), None);
    }
}

fn checked(first: f32, last: f32, val_loss: f32) -> Checked {
    Checked {
        first,
        last,
        val_loss,
        no_gradient: Vec::new(),
        losses: Vec::new(),
    }
}

/// A check whose loss falls by `fall` in `steps` steps (exponentially) with `noise` of one
/// step's loss (uniform in ±`noise`, from a fixed xorshift sequence).
fn curve(first: f32, fall: f32, noise: f32, steps: usize) -> Checked {
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let losses: Vec<f32> = (0..steps)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let uniform = (state >> 40) as f32 / (1u64 << 24) as f32;
            let t = i as f32 / (steps - 1) as f32;
            let trend = first * (1.0 - fall).powf(t);
            trend * (1.0 + (2.0 * uniform - 1.0) * noise)
        })
        .collect();
    Checked {
        first: losses[0],
        last: losses[steps - 1],
        val_loss: first,
        no_gradient: Vec::new(),
        losses,
    }
}

#[test]
fn validate_refuses_only_a_pipeline_that_does_not_learn() {
    let r = Recipe::default();
    // The SFT job of issue 49: a small Llama pretrained from scratch, LoRA r 8, 3.99 → 3.71.
    let (ok, d) = validated(30, &curve(3.9943, 0.072, 0.002, 30), true, &r);
    assert!(ok, "{}", d.reason);
    assert!(
        d.reason
            .starts_with("warning: one batch of 8 through the adapters"),
        "{}",
        d.reason
    );
    assert!(d.reason.contains("short of the −50 %"), "{}", d.reason);
    // Flat within its noise (shuffled labels, a zero LR), rising, not finite: refused.
    let flat = curve(2.3, 0.01, 0.02, 30);
    let (ok, d) = validated(30, &flat, false, &r);
    assert!(!ok && d.reason.contains("beyond its own noise"), "{}", d.reason);
    let (ok, d) = validated(30, &curve(2.3, -0.3, 0.01, 30), false, &r);
    assert!(!ok && d.reason.contains("rose"), "{}", d.reason);
    let mut nan = curve(2.3, 0.5, 0.01, 30);
    nan.losses[20] = f32::NAN;
    let (ok, d) = validated(30, &nan, false, &r);
    assert!(!ok && d.reason.contains("not finite"), "{}", d.reason);
    // A smooth but tiny fall is no learning either (an LR of 1e-7).
    assert!(!validated(30, &curve(2.3, 0.005, 0.0, 30), false, &r).0);
    // LoRA r 2 on the value projections of a Llama of random weights: 10.82 → 10.62, smooth.
    let (ok, d) = validated(30, &curve(10.8167, 0.018, 0.0005, 30), true, &r);
    assert!(ok && d.reason.starts_with("warning"), "{}", d.reason);
    // A fall that a noisy loss makes by chance is not a fall.
    assert!(!validated(30, &curve(2.3, 0.05, 0.08, 30), false, &r).0);
    // A model that memorises the batch passes without a warning.
    let (ok, d) = validated(30, &curve(0.7, 0.95, 0.01, 30), false, &r);
    assert!(
        ok && d.reason.starts_with("overfitting one batch of 8"),
        "{}",
        d.reason
    );
}

#[test]
fn validate_passes_a_batch_loss_that_falls_and_warns_when_it_falls_short() {
    let r = Recipe::default();
    let (ok, d) = validated(30, &checked(0.7, 0.05, 0.69), false, &r);
    assert!(ok && !d.reason.starts_with("warning"), "{}", d.reason);
    let (ok, d) = validated(30, &checked(0.7, 0.2, 0.69), false, &r);
    assert!(ok && d.reason.starts_with("warning"), "{}", d.reason);
    let (ok, d) = validated(30, &checked(0.7, 0.697, 0.69), false, &r);
    assert!(!ok);
    assert_eq!(d.kind, DecisionKind::ValidateFailed);
    assert!(
        !validated(30, &checked(0.7, 0.01, f32::NAN), false, &r).0,
        "a non-finite evaluation fails"
    );
}

#[test]
fn an_adapter_job_is_held_to_what_adapters_reach_and_every_adapter_must_get_a_gradient() {
    let r = Recipe::default();
    // SmolLM2-135M with LoRA r 8 on q/v went 3.795 → 1.649 at 1e-3: not a whole model's −90 %.
    let lora = checked(3.795, 1.649, 3.9);
    let (_, whole) = validated(30, &lora, false, &r);
    assert!(
        whole.reason.starts_with("warning"),
        "short of a whole model's −90 %"
    );
    let (ok, d) = validated(30, &lora, true, &r);
    assert!(ok, "{}", d.reason);
    assert!(
        d.reason.contains("through the adapters (LR 5e-3)"),
        "{}",
        d.reason
    );
    assert_eq!(d.evidence["min_fall"], 0.5);
    let (ok, d) = validated(30, &checked(3.99, 3.98, 4.0), true, &r);
    assert!(!ok);
    assert!(
        d.reason
            .starts_with("the adapters did not move the loss of one batch of 8 beyond its own noise"),
        "{}",
        d.reason
    );
    assert!(d.reason.contains("in 30 steps at LR 5e-3"), "{}", d.reason);
    let mut dead = lora.clone();
    dead.no_gradient = (0..7).map(|i| format!("layers.{i}.v_proj.lora_A")).collect();
    let (ok, d) = validated(30, &dead, true, &r);
    assert!(!ok);
    assert!(
        d.reason.starts_with(
            "7 trainable parameter(s) received no gradient in validate's 30 steps (layers.0.v_proj.lora_A, "
        ),
        "{}",
        d.reason
    );
    assert!(
        d.reason.contains("layers.4.v_proj.lora_A and 2 more)"),
        "{}",
        d.reason
    );
    assert_eq!(d.evidence["no_gradient"].as_array().unwrap().len(), 7);
    dead.last = 0.01;
    assert!(
        validated(30, &dead, false, &r).0,
        "a whole model may hold parameters its loss does not use"
    );
}
