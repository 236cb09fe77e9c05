//! Unit tests of `load.rs`.

use super::*;
use crate::template::default_recipe;

fn parse(s: &str) -> Result<Recipe, RecipeError> {
    Recipe::parse(s, Path::new("r.toml"))
}

#[test]
fn a_pretrained_model_needs_kind_bert_and_a_directory() {
    let err = parse("[model]\nkind = \"bert\"\n").unwrap_err().to_string();
    assert!(
        err.starts_with("r.toml:2: `model.kind`") && err.contains("model.pretrained"),
        "{err}"
    );
    let err = parse("[model]\npretrained = \"m\"\n").unwrap_err().to_string();
    assert!(
        err.contains("`model.pretrained`") && err.contains("kind = \"bert\""),
        "{err}"
    );
    let r = parse("[model]\nkind = \"bert\"\npretrained = \"m\"\n").unwrap();
    assert_eq!((r.main.lr, r.contract.prune.len()), (5e-5, 3));
}

#[test]
fn the_pretrained_template_is_a_fine_tune_of_its_checkpoint() {
    let ck = crate::template::Checkpoint {
        dir: "models/minilm".into(),
        max_positions: 512,
        dropout: 0.1,
        sentence_encoder: true,
    };
    let r = parse(&crate::template::pretrained_recipe(&ck, false)).unwrap();
    assert_eq!(r.model.kind, ModelKind::Bert);
    assert_eq!(r.model.pretrained.as_deref(), Some("models/minilm"));
    assert_eq!(r.model.pooling, Some(crate::Pooling::Mean));
    assert_eq!((r.model.seq_len, r.model.dropout), (128, 0.1));
    assert_eq!((r.main.lr, r.main.warmup, r.validate.lr), (5e-5, 0.06, 1e-4));
    let globs: Vec<&str> = r.contract.prune.iter().map(|p| p.params.as_str()).collect();
    assert!(
        globs.iter().all(|g| g.starts_with("bert.encoder.layer.*.")),
        "{globs:?}"
    );
    // Everything else is the default recipe's.
    let d = Recipe::default();
    assert_eq!((r.data, r.refine, r.guards), (d.data, d.refine, d.guards));
    // A short checkpoint gets its own length; a plain BERT the [CLS] pooler.
    let short = crate::template::Checkpoint {
        max_positions: 64,
        sentence_encoder: false,
        ..ck
    };
    let r = parse(&crate::template::pretrained_recipe(&short, false)).unwrap();
    assert_eq!(
        (r.model.seq_len, r.model.pooling),
        (64, Some(crate::Pooling::Cls))
    );
}

#[test]
fn a_lora_section_adapts_a_pretrained_encoder_at_lora_lrs() {
    let base = "[model]\nkind = \"bert\"\npretrained = \"m\"\n";
    let r = parse(&format!("{base}[model.lora]\nrank = 4\n")).unwrap();
    let l = r.model.lora.clone().unwrap();
    assert_eq!(
        (l.rank, l.alpha, l.targets),
        (4, 16.0, vec!["query".to_string(), "value".into()])
    );
    assert_eq!((r.main.lr, r.validate.lr), (crate::recipe::LORA_LR, 1e-3));
    // The resolved form round-trips, and an explicit LR wins.
    assert_eq!(parse(&r.to_toml()).unwrap(), r);
    let r = parse(&format!("[main]\nlr = 2e-4\n{base}[model.lora]\n")).unwrap();
    assert_eq!(r.main.lr, 2e-4);
    for (body, key) in [
        ("[model.lora]\nrank = 0\n", "model.lora.rank"),
        ("[model.lora]\nalpha = -1.0\n", "model.lora.alpha"),
        ("[model.lora]\ntargets = []\n", "model.lora.targets"),
    ] {
        let err = parse(&format!("{base}{body}")).unwrap_err().to_string();
        assert!(err.contains(&format!("`{key}`")), "{err}");
    }
    let err = parse("[model.lora]\nrank = 4\n").unwrap_err().to_string();
    assert!(
        err.contains("`model.lora`") && err.contains("kind = \"bert\""),
        "{err}"
    );
    let err = parse(&format!("{base}[model.lora]\nrnak = 4\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("rank"), "{err}");
}

#[test]
fn gradient_checkpointing_needs_blocks_and_round_trips() {
    let r = parse("[model]\ngradient_checkpointing = true\n").unwrap();
    assert!(r.model.gradient_checkpointing);
    assert!(r.to_toml().contains("gradient_checkpointing = true"));
    assert_eq!(parse(&r.to_toml()).unwrap(), r);
    // Off, the key is not written: recipes written before it read and write the same.
    assert!(
        !crate::Recipe::default()
            .to_toml()
            .contains("gradient_checkpointing")
    );
    let err = parse("[model]\nkind = \"mlp\"\ngradient_checkpointing = true\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`model.gradient_checkpointing`") && err.contains("no transformer blocks"),
        "{err}"
    );
}

#[test]
fn the_lora_template_parses_to_its_section_and_lrs() {
    let ck = crate::template::Checkpoint {
        dir: "models/minilm".into(),
        max_positions: 512,
        dropout: 0.1,
        sentence_encoder: true,
    };
    let r = parse(&crate::template::pretrained_recipe(&ck, true)).unwrap();
    assert_eq!(r.model.lora, Some(crate::recipe::Lora::default()));
    assert_eq!((r.main.lr, r.validate.lr), (crate::recipe::LORA_LR, 1e-3));
    assert_eq!(r.model.pretrained.as_deref(), Some("models/minilm"));
}

#[test]
fn the_template_is_the_default() {
    assert_eq!(parse(&default_recipe()).unwrap(), Recipe::default());
    assert_eq!(parse("").unwrap(), Recipe::default());
    let resolved = Recipe::default().to_toml();
    assert_eq!(
        parse(&resolved).unwrap(),
        Recipe::default(),
        "the resolved form round-trips"
    );
}

#[test]
fn an_mlp_gets_its_own_defaults_for_what_the_file_leaves_unset() {
    let r = parse("[model]\nkind = \"mlp\"\n").unwrap();
    assert_eq!((r.main.lr, r.validate.lr), (1e-3, 3e-3));
    assert_eq!(r.contract.prune.len(), 1);
    assert_eq!(r.contract.prune[0].params, "layers.*");
    let r = parse("[model]\nkind = \"mlp\"\n[main]\nlr = 5e-4\n").unwrap();
    assert_eq!(
        r.main.lr, 5e-4,
        "a value written in the file is kept, even the transformer's"
    );
    assert_eq!(
        parse(&r.to_toml()).unwrap(),
        r,
        "the resolved MLP recipe round-trips"
    );
}

#[test]
fn an_unknown_key_names_its_line_and_the_nearest_key() {
    let err = parse("[run]\nseed = 1\n\n[main]\nsteps = 10\nlrr = 0.1\n")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("r.toml:6:"), "{err}");
    assert!(
        err.contains("unknown field `lrr`") && err.contains("did you mean `lr`?"),
        "{err}"
    );
    let err = parse("[main]\nbatchsize = 3\n").unwrap_err().to_string();
    assert!(err.contains("did you mean `batch`?"), "{err}");
    let err = parse("[contract]\nprune_scpe = 'global'\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("did you mean `prune_scope`?"), "{err}");
    let err = parse("[mian]\nsteps = 1\n").unwrap_err().to_string();
    assert!(
        err.starts_with("r.toml:1:") && err.contains("did you mean `main`?"),
        "{err}"
    );
}

#[test]
fn a_wrong_type_or_variant_is_named() {
    let err = parse("[main]\nsteps = \"many\"\n").unwrap_err().to_string();
    assert!(err.starts_with("r.toml:2:"), "{err}");
    let err = parse("[main]\nschedule = \"cosin\"\n").unwrap_err().to_string();
    assert!(err.contains("did you mean `cosine`?"), "{err}");
}

#[test]
fn out_of_range_values_name_key_and_line() {
    let err = parse("[main]\nbatch = 32\n\n[contract]\nbatch = 8\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("r.toml:5: `contract.batch` is 8, below half of main.batch = 32"),
        "{err}"
    );
    let err = parse("[data.split]\ntrain = 0.9\n").unwrap_err().to_string();
    assert!(
        err.contains("`data.split.train`") && err.contains("expected 1"),
        "{err}"
    );
    let err = parse("[model]\nheads = 3\n").unwrap_err().to_string();
    assert!(err.starts_with("r.toml:2: `model.heads` is 3"), "{err}");
    let err = parse("[data]\ndedup = \"nera\"\n").unwrap_err().to_string();
    assert!(err.contains("did you mean `near`?"), "{err}");
    let err = parse("[refine.distill]\nlayers = 1\nheads = 3\n")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("r.toml:3: `refine.distill.heads` is 3"), "{err}");
    let err = parse("[refine.distill]\nw_ce = 0\nw_kd = 0\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`refine.distill.w_kd`") && err.contains("not both 0"),
        "{err}"
    );
    let err = parse("[contract]\nprune_scope = \"globl\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("did you mean `global`?"), "{err}");
}

#[test]
fn the_spike_keys_default_and_name_themselves_when_out_of_range() {
    let g = parse("").unwrap().guards;
    assert_eq!((g.spike_z, g.spike_over_max, g.spike_ratio), (10.0, 4.0, 2.0));
    assert_eq!((g.spike_window, g.spike_history), (64, 16));
    assert_eq!(
        (g.spike_retries, g.spike_lr_factor, g.spike_chance),
        (8, 0.5, 0.05)
    );
    let off = parse("[guards]\nspike_z = inf\n").unwrap();
    assert_eq!(off.guards.spike_z, f64::INFINITY);
    assert_eq!(parse(&off.to_toml()).unwrap(), off, "inf round-trips");
    for (body, key, line) in [
        ("spike_z = 0.0", "spike_z", 2),
        ("spike_z = nan", "spike_z", 2),
        ("spike_ratio = 1.0", "spike_ratio", 2),
        ("spike_ratio = inf", "spike_ratio", 2),
        ("spike_over_max = 0.5", "spike_over_max", 2),
        ("spike_history = 2", "spike_history", 2),
        ("spike_window = 8\nspike_history = 16", "spike_history", 3),
        ("spike_window = 100000", "spike_window", 2),
        ("spike_lr_factor = 1.5", "spike_lr_factor", 2),
        ("spike_chance = 0.0", "spike_chance", 2),
    ] {
        let err = parse(&format!("[guards]\n{body}\n")).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("r.toml:{line}: `guards.{key}` is ")),
            "{body}: {err}"
        );
    }
    let err = parse("[guards]\nspike_zz = 3.0\n").unwrap_err().to_string();
    assert!(err.contains("did you mean `spike_z`?"), "{err}");
}

#[test]
fn a_model_this_machine_cannot_train_is_refused_with_the_estimate() {
    if crate::size::machine_memory().is_none() {
        return;
    }
    let text = "[model]\nd_model = 2000000000\nheads = 4\n";
    let err = parse(text).unwrap_err().to_string();
    assert!(
        err.contains("`model.d_model` makes a model this machine cannot train"),
        "{err}"
    );
    assert!(
        err.contains("parameters") && err.contains("B of memory here"),
        "{err}"
    );
    let text = "[model]\nvocab = 4000000000\n";
    let err = parse(text).unwrap_err().to_string();
    assert!(err.contains("`model.vocab`"), "{err}");
    let text = "[main]\nbatch = 100000000\n[contract]\nbatch = 100000000\n";
    let err = parse(text).unwrap_err().to_string();
    assert!(err.contains("`main.batch`"), "{err}");
    let need = Recipe::default().training_memory().unwrap();
    assert!(need.total() < 1e9, "the default fits any machine: {need:?}");
    // An MLP's hidden width is its ffn; its d_model is not used.
    let err = parse("[model]\nkind = \"mlp\"\nffn = 2000000000\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("`model.ffn`"), "{err}");
    assert!(parse("[model]\nkind = \"mlp\"\nd_model = 2000000000\nheads = 4\n").is_ok());
}

#[test]
fn step_counts_are_bounded_so_the_plan_cannot_overflow() {
    let err = parse("[main]\nsteps = 9223372036854775807\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`main.steps` is 9223372036854775807, expected at most 2^40"),
        "{err}"
    );
    let err = parse("[run]\neval_every = 2000000000000\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("`run.eval_every`"), "{err}");
    assert!(parse("[main]\nsteps = 1099511627776\n").is_ok());
}
