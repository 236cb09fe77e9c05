//! Unit tests of `preflight.rs`.

use super::*;
use contrai_recipe::Recipe;

/// A job within every rule: what each test then breaks one fact of.
fn clean() -> JobFacts {
    JobFacts {
        source: Some(Source::Hf),
        precision: Some(Precision::Bf16),
        model_dtype: Some(Precision::Bf16),
        recipe_precision: None,
        native_bf16: Some(true),
        tuning: Some(Tuning::Lora),
        gradient_checkpointing: Some(true),
        reentrant: Some(false),
        input_grads: Some(false),
        accumulation: Some(4),
        token_level_loss: Some(true),
        loss_over_window: Some(true),
        warmup_ratio: Some(0.03),
        warmup_steps: None,
        total_steps: Some(1000),
        decay: Some(DecayShape::Cosine),
        peak_lr: Some(2e-4),
        per_device_batch: Some(8),
        devices: Some(1),
        checkpoint_every: Some(Cadence::Steps(50)),
        eval_split: Some(true),
        holdout: Some(true),
    }
}

/// The kinds `facts` gives.
fn kinds(facts: &JobFacts) -> Vec<FindingKind> {
    check(facts).into_iter().map(|f| f.kind).collect()
}

#[test]
fn a_clean_job_and_an_unknown_one_give_nothing() {
    assert_eq!(check(&clean()), vec![]);
    assert_eq!(check(&JobFacts::default()), vec![]);
}

#[test]
fn fp16_on_a_bf16_model_is_an_error_and_fp16_on_an_fp16_model_is_not() {
    let f = JobFacts {
        precision: Some(Precision::Fp16),
        ..clean()
    };
    let found = check(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, FindingKind::Fp16OnBf16Model);
    assert_eq!(found[0].severity, Severity::Error);
    assert!(found[0].message.contains("bf16=True"), "{}", found[0].message);
    let fp16_model = JobFacts {
        model_dtype: Some(Precision::Fp16),
        ..f
    };
    assert_eq!(kinds(&fp16_model), vec![]);
}

#[test]
fn bf16_where_it_is_not_native_is_a_warning_and_fp32_there_is_not() {
    let slow = JobFacts {
        native_bf16: Some(false),
        ..clean()
    };
    let found = check(&slow);
    assert_eq!(kinds(&slow), vec![FindingKind::Bf16NotNative]);
    assert_eq!(found[0].severity, Severity::Warning);
    assert!(
        found[0].message.contains("set bf16=False"),
        "{}",
        found[0].message
    );
    let lightning = JobFacts {
        source: Some(Source::Lightning),
        ..slow.clone()
    };
    assert!(check(&lightning)[0].message.contains("precision=\"32-true\""));
    let fp32 = JobFacts {
        precision: Some(Precision::Fp32),
        ..slow.clone()
    };
    assert_eq!(check(&fp32), vec![]);
    let unknown = JobFacts {
        native_bf16: None,
        ..slow
    };
    assert_eq!(check(&unknown), vec![]);
}

#[test]
fn reentrant_checkpointing_of_adapters_is_an_error_without_input_grads_and_a_warning_with() {
    let f = JobFacts {
        reentrant: Some(true),
        ..clean()
    };
    assert_eq!(kinds(&f), vec![FindingKind::CheckpointingWithoutInputGrads]);
    let hooked = JobFacts {
        input_grads: Some(true),
        ..f.clone()
    };
    assert_eq!(kinds(&hooked), vec![FindingKind::ReentrantCheckpointingWithLora]);
    let unknown = JobFacts {
        input_grads: None,
        ..f.clone()
    };
    assert_eq!(kinds(&unknown), vec![FindingKind::ReentrantCheckpointingWithLora]);
    let full = JobFacts {
        tuning: Some(Tuning::Full),
        ..f.clone()
    };
    assert_eq!(kinds(&full), vec![]);
    let off = JobFacts {
        gradient_checkpointing: Some(false),
        ..f
    };
    assert_eq!(kinds(&off), vec![]);
}

#[test]
fn an_unnormalised_token_loss_is_found_only_when_it_accumulates() {
    let f = JobFacts {
        loss_over_window: Some(false),
        ..clean()
    };
    assert_eq!(kinds(&f), vec![FindingKind::LossNotNormalised]);
    let one = JobFacts {
        accumulation: Some(1),
        per_device_batch: Some(32),
        ..f.clone()
    };
    assert_eq!(kinds(&one), vec![]);
    let per_sample = JobFacts {
        token_level_loss: Some(false),
        ..f
    };
    assert_eq!(kinds(&per_sample), vec![]);
}

#[test]
fn warmup_is_judged_at_both_ends_of_two_to_five_percent() {
    for (share, found) in [
        (0.0, true),
        (0.019, true),
        (0.02, false),
        (0.05, false),
        (0.051, true),
        (0.1, true),
    ] {
        let f = JobFacts {
            warmup_ratio: Some(share),
            ..clean()
        };
        let want = if found {
            vec![FindingKind::WarmupOutsideRange]
        } else {
            vec![]
        };
        assert_eq!(kinds(&f), want, "warmup {share}");
    }
    let steps = JobFacts {
        warmup_ratio: None,
        warmup_steps: Some(100),
        ..clean()
    };
    let found = check(&steps);
    assert_eq!(found[0].kind, FindingKind::WarmupOutsideRange);
    assert!(
        found[0].message.contains("warmup_steps=30"),
        "{}",
        found[0].message
    );
    let unknown_total = JobFacts {
        total_steps: None,
        ..steps
    };
    assert_eq!(kinds(&unknown_total), vec![]);
}

#[test]
fn linear_and_constant_decay_are_found_other_shapes_are_not() {
    for (decay, found) in [
        (DecayShape::Linear, true),
        (DecayShape::Constant, true),
        (DecayShape::Cosine, false),
        (DecayShape::Other, false),
    ] {
        let f = JobFacts {
            decay: Some(decay),
            ..clean()
        };
        assert_eq!(kinds(&f) == vec![FindingKind::DecayNotCosine], found, "{decay:?}");
    }
}

#[test]
fn the_seed_articles_lora_job_is_one_error_in_place_of_its_schedule_warnings() {
    let article = JobFacts {
        warmup_ratio: Some(0.1),
        decay: Some(DecayShape::Linear),
        peak_lr: Some(2e-4),
        ..clean()
    };
    let found = check(&article);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, FindingKind::SeedArticleFailure);
    assert_eq!(found[0].severity, Severity::Error);
    let full = JobFacts {
        tuning: Some(Tuning::Full),
        ..article.clone()
    };
    assert_eq!(
        kinds(&full),
        vec![FindingKind::WarmupOutsideRange, FindingKind::DecayNotCosine]
    );
    let low_lr = JobFacts {
        peak_lr: Some(5e-5),
        ..article
    };
    assert_eq!(
        kinds(&low_lr),
        vec![FindingKind::WarmupOutsideRange, FindingKind::DecayNotCosine]
    );
}

#[test]
fn the_effective_batch_must_be_16_to_64_and_the_fix_lands_inside() {
    for (b, d, a, found) in [
        (8, 1, 1, true),
        (4, 2, 2, false),
        (16, 1, 1, false),
        (64, 1, 1, false),
        (65, 1, 1, true),
        (32, 4, 1, true),
        (3, 1, 1, true),
    ] {
        let f = JobFacts {
            per_device_batch: Some(b),
            devices: Some(d),
            accumulation: Some(a),
            ..clean()
        };
        let found_now = check(&f);
        assert_eq!(!found_now.is_empty(), found, "{b}×{d}×{a}: {found_now:?}");
        if let Some(x) = found_now.first() {
            let fixed: u64 = x
                .message
                .split("effective batch ")
                .last()
                .unwrap()
                .trim_end_matches(").")
                .parse()
                .unwrap();
            assert!(EFFECTIVE_BATCH.contains(&fixed), "{}", x.message);
        }
    }
}

#[test]
fn checkpoints_rarer_than_every_50_steps_or_none_are_found() {
    for (cadence, found) in [
        (Cadence::Steps(50), false),
        (Cadence::Steps(51), true),
        (Cadence::Steps(500), true),
        (Cadence::Never, true),
    ] {
        let f = JobFacts {
            checkpoint_every: Some(cadence),
            ..clean()
        };
        assert_eq!(
            kinds(&f) == vec![FindingKind::SparseCheckpoints],
            found,
            "{cadence:?}"
        );
    }
}

#[test]
fn missing_validation_is_an_error_and_a_missing_holdout_a_warning() {
    let f = JobFacts {
        eval_split: Some(false),
        holdout: Some(false),
        ..clean()
    };
    let found = check(&f);
    let got: Vec<(FindingKind, Severity)> = found.iter().map(|f| (f.kind, f.severity)).collect();
    assert_eq!(
        got,
        vec![
            (FindingKind::NoEvalSplit, Severity::Error),
            (FindingKind::NoHoldout, Severity::Warning)
        ]
    );
}

#[test]
fn a_recipe_asking_bf16_of_a_job_that_trains_in_fp32_is_a_warning() {
    let unheeded = JobFacts {
        precision: Some(Precision::Fp32),
        recipe_precision: Some(Precision::Bf16),
        ..clean()
    };
    let found = check(&unheeded);
    assert_eq!(kinds(&unheeded), vec![FindingKind::PrecisionNotApplied]);
    assert_eq!(found[0].severity, Severity::Warning);
    assert!(
        found[0].message.contains("trains in fp32") && found[0].message.contains("bf16=True"),
        "{}",
        found[0].message
    );
    let lightning = JobFacts {
        source: Some(Source::Lightning),
        ..unheeded.clone()
    };
    assert!(check(&lightning)[0].message.contains("bf16-mixed"));
    // A job in bf16 under that recipe, and one under a recipe in f32 (its default), are fine.
    let heeded = JobFacts {
        recipe_precision: Some(Precision::Bf16),
        ..clean()
    };
    assert_eq!(kinds(&heeded), vec![]);
    let default = JobFacts {
        recipe_precision: Some(Precision::Fp32),
        ..clean()
    };
    assert_eq!(kinds(&default), vec![]);
    // A recipe's own facts say its precision, and its own engine applies it.
    let mut recipe = Recipe::default();
    recipe.model.precision = contrai_recipe::Precision::Bf16;
    let own = JobFacts::from_recipe(&recipe);
    assert_eq!(own.precision, Some(Precision::Bf16));
    assert_eq!(kinds(&own), vec![]);
}

#[test]
fn the_default_recipe_is_within_the_rules_and_the_thresholds_are_its_defaults() {
    let recipe = Recipe::default();
    assert_eq!(check(&JobFacts::from_recipe(&recipe)), vec![]);
    assert_eq!(recipe.main.warmup, WARMUP_FIX);
    assert_eq!(recipe.run.checkpoint_every, CHECKPOINT_EVERY);
    assert_eq!(recipe.main.effective_batch() as u64, EFFECTIVE_BATCH_FIX);
}

#[test]
fn a_precisions_name_is_its_json_spelling() {
    for p in [Precision::Fp32, Precision::Fp16, Precision::Bf16] {
        assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
    }
}

#[test]
fn facts_read_from_json_refuse_unknown_fields_and_findings_serialise_snake_case() {
    let f: JobFacts = serde_json::from_str(
        r#"{"source": "hf", "precision": "fp16", "model_dtype": "bf16", "checkpoint_every": {"Steps": 500}}"#,
    )
    .unwrap();
    assert_eq!(f.checkpoint_every, Some(Cadence::Steps(500)));
    let v = serde_json::to_value(check(&f)).unwrap();
    assert_eq!(v[0]["kind"], "fp16_on_bf16_model");
    assert_eq!(v[0]["severity"], "error");
    assert_eq!(v[1]["evidence"]["checkpoint_every"]["Steps"], 500);
    for f in check(&f) {
        assert_eq!(serde_json::to_value(f.kind).unwrap(), f.kind.as_str());
        assert_eq!(serde_json::to_value(f.severity).unwrap(), f.severity.as_str());
    }
    assert!(serde_json::from_str::<JobFacts>(r#"{"warmup": 0.1}"#).is_err());
    let never: JobFacts = serde_json::from_str(r#"{"checkpoint_every": "Never"}"#).unwrap();
    assert_eq!(kinds(&never), vec![FindingKind::SparseCheckpoints]);
}
