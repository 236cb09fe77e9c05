//! Pruning's policy: which weight matrices the recipe's rules select (globs compiled once), the
//! module each belongs to, the gradual schedule, and the caps — attention's single-weight cap,
//! diagnose's measured caps, and a frozen module's current sparsity. The engine turns the targets
//! into masks by magnitude.

use std::collections::BTreeMap;

use contrai_recipe::recipe::Prune;
use contrai_recipe::{PruneSchedule, Recipe};

use crate::protocol::{PruneOrder, Target};
use crate::state::State;

/// The cap of attention weights pruned one by one: zeroing single weights inside attention breaks
/// heads (whole heads are not capped).
pub const ATTENTION_CAP: f64 = 0.2;

/// Sparsity levels the `diagnose` phase prunes each module to, one at a time, on a copy.
pub const SENSITIVITY_LEVELS: [f64; 4] = [0.1, 0.2, 0.3, 0.5];

/// The module a weight belongs to: its path without the parameter name and, below a block, the
/// layer's name (`blocks.0.attn.query.weight` → `blocks.0.attn`, `layers.1.weight` → `layers.1`).
pub fn module_of(path: &str) -> String {
    let parts: Vec<&str> = path.split('.').collect();
    let owner = parts.len().saturating_sub(1).max(1);
    let keep = if owner >= 3 { owner - 1 } else { owner };
    parts[..keep].join(".")
}

/// Whether a module is an attention module (pruned by whole heads, or capped one weight at a time):
/// `…attn` / `…self_attn` (Contrai's transformer, GPT-2, Llama), and the BERT family's
/// `…attention.self` (query, key, value) and `…attention.output` (its output projection).
pub fn is_attention(module: &str) -> bool {
    module.ends_with("attn") || module.ends_with("attention.self") || module.ends_with("attention.output")
}

/// A structure pruned whole: its entries go together across the matrices that share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whole {
    /// An attention head: its query, key and value outputs with the output projection's inputs.
    Heads,
    /// A feed-forward unit: its expansion (and gate) output with the projection's input.
    Units,
}

impl Whole {
    /// The structure's name, as records and the Python engine say it.
    pub fn name(self) -> &'static str {
        match self {
            Whole::Heads => "heads",
            Whole::Units => "units",
        }
    }
}

/// How a weight matrix takes part in a structure pruned whole, for both engines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Heads or units.
    pub whole: Whole,
    /// The matrix whose pruning target decides the groups: the attention's query, the
    /// feed-forward layer's expansion.
    pub key: String,
    /// Whether the groups are the matrix's input features (an output or down projection) rather
    /// than its output features. Each engine maps this to its layout (PyTorch `[out, in]`: the
    /// columns; Burn `[in, out]`: the rows).
    pub by_inputs: bool,
}

/// How the matrix `path` takes part in whole heads (when `heads`) or whole units (when `units`),
/// in the naming of either engine's models: Contrai's transformer (`blocks.N.attn.{query,key,value,
/// output}`, `blocks.N.ffn.{up,down}`), the BERT family (`…attention.self.{query,key,value}` —
/// `self_attn` in Contrai's port, `self` being a Rust keyword — with `…attention.output.dense`,
/// and `…intermediate.dense` with `…output.dense`) and Llama's MLP (`…mlp.{up,gate,down}_proj`).
/// `has` tells which matrices the model holds (BERT's output projection belongs to whichever of
/// `self` and `self_attn` it has).
pub fn member_of(path: &str, heads: bool, units: bool, has: &dyn Fn(&str) -> bool) -> Option<Member> {
    let w = path.strip_suffix(".weight")?;
    let head = heads.then(|| head_member(w, has)).flatten();
    head.or_else(|| units.then(|| unit_member(path, w)).flatten())
}

/// [`member_of`] for attention heads: keyed by the attention module's query matrix.
fn head_member(w: &str, has: &dyn Fn(&str) -> bool) -> Option<Member> {
    let member = |module: &str, by_inputs| Member {
        whole: Whole::Heads,
        key: format!("{module}.query.weight"),
        by_inputs,
    };
    if let Some(layer) = w.strip_suffix(".attention.output.dense") {
        return ["self", "self_attn"]
            .map(|s| format!("{layer}.attention.{s}"))
            .into_iter()
            .find(|m| has(&format!("{m}.query.weight")))
            .map(|m| member(&m, true));
    }
    let (module, name) = w.rsplit_once('.')?;
    let by_inputs = match name {
        "query" | "key" | "value" => false,
        "output" => true,
        _ => return None,
    };
    is_attention(module).then(|| member(module, by_inputs))
}

/// [`member_of`] for feed-forward units: keyed by the layer's expansion matrix.
fn unit_member(path: &str, w: &str) -> Option<Member> {
    let member = |key: String, by_inputs| {
        Some(Member {
            whole: Whole::Units,
            key,
            by_inputs,
        })
    };
    let (owner, name) = w.rsplit_once('.')?;
    match name {
        "up" if owner.ends_with(".ffn") => member(path.to_string(), false),
        "down" if owner.ends_with(".ffn") => member(format!("{owner}.up.weight"), true),
        "up_proj" if owner.ends_with(".mlp") => member(path.to_string(), false),
        "gate_proj" if owner.ends_with(".mlp") => member(format!("{owner}.up_proj.weight"), false),
        "down_proj" if owner.ends_with(".mlp") => member(format!("{owner}.up_proj.weight"), true),
        "dense" if owner.ends_with(".intermediate") => member(path.to_string(), false),
        "dense" if !owner.ends_with(".attention.output") => {
            let layer = owner.strip_suffix(".output")?;
            member(format!("{layer}.intermediate.dense.weight"), true)
        }
        _ => None,
    }
}

/// The sparsity of a gradual schedule at `progress` in [0, 1]: cubic (Zhu & Gupta,
/// `s_f + (s_i − s_f)(1 − p)³`: fast early, gentle as the model settles) or linear.
pub fn scheduled_sparsity(init: f64, fin: f64, progress: f64, schedule: PruneSchedule) -> f64 {
    let p = progress.clamp(0.0, 1.0);
    match schedule {
        PruneSchedule::Cubic => fin + (init - fin) * (1.0 - p).powi(3),
        PruneSchedule::Linear => init + (fin - init) * p,
    }
}

/// The recipe's prune rules, compiled once.
#[derive(Debug, Clone, Default)]
pub struct PruneRules(Vec<(glob::Pattern, Prune)>);

impl PruneRules {
    /// Compiles `rules` (the recipe validated the globs; one that does not compile selects nothing).
    pub fn new(rules: &[Prune]) -> PruneRules {
        PruneRules(
            rules
                .iter()
                .filter_map(|r| Some((glob::Pattern::new(&r.params).ok()?, r.clone())))
                .collect(),
        )
    }

    /// The first rule whose glob matches a parameter path.
    pub fn rule_for(&self, path: &str) -> Option<&Prune> {
        self.0.iter().find(|(g, _)| g.matches(path)).map(|(_, r)| r)
    }
}

/// The weight matrices the rules select, each with its module and rule, in the model's order.
#[derive(Debug, Clone, Default)]
pub struct Prunable(Vec<(String, String, Prune)>);

impl Prunable {
    /// The matrices among `weights` (paths of the model's weight matrices) that `rules` select.
    pub fn new(rules: &[Prune], weights: &[String]) -> Prunable {
        let rules = PruneRules::new(rules);
        Prunable(
            weights
                .iter()
                .filter_map(|p| Some((p.clone(), module_of(p), rules.rule_for(p)?.clone())))
                .collect(),
        )
    }

    /// The selected matrices' paths, in the model's order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(p, _, _)| p.as_str())
    }

    /// Whether nothing is pruned.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The pruned modules, in the model's order, each once.
    pub fn modules(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, m, _) in &self.0 {
            if !out.contains(m) {
                out.push(m.clone());
            }
        }
        out
    }

    /// The sparsity a module reaches at the end of contraction by the recipe's rules alone: its
    /// first matrix's rule's `final`, attention within [`ATTENTION_CAP`] unless whole heads go.
    pub fn planned(&self, module: &str, by_heads: bool) -> f64 {
        let fin = self
            .0
            .iter()
            .find(|(_, m, _)| m == module)
            .map_or(0.0, |(_, _, r)| r.final_sparsity);
        if is_attention(module) && !by_heads {
            fin.min(ATTENTION_CAP)
        } else {
            fin
        }
    }

    /// Gradual magnitude pruning at the current step of contraction: every selected matrix moves
    /// to its rule's scheduled sparsity, within its module's cap (attention's single-weight cap,
    /// diagnose's measurement); a frozen module holds its sparsity.
    pub fn order(&self, state: &State, recipe: &Recipe, heads: Option<usize>) -> PruneOrder {
        let c = &recipe.contract;
        let seg = state.segment;
        let progress = state.k() as f64 / (c.prune_span * seg.steps as f64).max(1.0);
        let con = &state.contraction;
        let targets = self
            .0
            .iter()
            .map(|(path, module, rule)| {
                let target = if con.frozen.contains(module) {
                    let now = state.sparsity.get(module).copied().unwrap_or(0.0);
                    Target {
                        sparsity: now,
                        cap: now,
                    }
                } else {
                    let single = if is_attention(module) && heads.is_none() {
                        ATTENTION_CAP
                    } else {
                        1.0
                    };
                    Target {
                        sparsity: scheduled_sparsity(
                            rule.init,
                            rule.final_sparsity,
                            progress,
                            c.prune_schedule,
                        ),
                        cap: con.caps.get(module).copied().unwrap_or(1.0).min(single),
                    }
                };
                (path.clone(), target)
            })
            .collect::<BTreeMap<_, _>>();
        PruneOrder {
            targets,
            scope: c.prune_scope,
            heads,
            units: c.prune_units,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cubic_schedule_matches_zhu_and_gupta() {
        let cubic = PruneSchedule::Cubic;
        assert!((scheduled_sparsity(0.1, 0.5, 0.0, cubic) - 0.1).abs() < 1e-12);
        // s = 0.5 + (0.1 − 0.5)(1 − 0.5)³ = 0.5 − 0.4 / 8 = 0.45
        assert!((scheduled_sparsity(0.1, 0.5, 0.5, cubic) - 0.45).abs() < 1e-12);
        assert!((scheduled_sparsity(0.1, 0.5, 1.0, cubic) - 0.5).abs() < 1e-12);
        assert!((scheduled_sparsity(0.1, 0.5, 0.5, PruneSchedule::Linear) - 0.3).abs() < 1e-12);
    }

    #[test]
    fn modules_of_paths() {
        assert_eq!(module_of("blocks.0.attn.query.weight"), "blocks.0.attn");
        assert_eq!(module_of("head.weight"), "head");
        assert_eq!(module_of("layers.1.weight"), "layers.1");
        assert_eq!(module_of("blocks.1.ln2.gamma"), "blocks.1");
        assert!(is_attention("blocks.1.attn") && !is_attention("blocks.1.ffn"));
        for hf in [
            "bert.encoder.layer.0.attention.self",
            "bert.encoder.layer.0.attention.output",
            "model.layers.3.self_attn",
        ] {
            assert!(is_attention(hf), "{hf}");
        }
        assert!(
            !is_attention("bert.encoder.layer.0.output")
                && !is_attention("bert.encoder.layer.0.intermediate")
        );
    }

    fn weights() -> Vec<String> {
        [
            "embed.weight",
            "blocks.0.attn.query.weight",
            "blocks.0.attn.output.weight",
            "blocks.0.ffn.up.weight",
            "head.weight",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn the_default_rules_select_attention_and_feed_forward_and_cap_attention() {
        let r = Recipe::default();
        let p = Prunable::new(&r.contract.prune, &weights());
        assert_eq!(p.modules(), ["blocks.0.attn", "blocks.0.ffn"]);
        assert_eq!(p.planned("blocks.0.attn", false), ATTENTION_CAP);
        assert_eq!(p.planned("blocks.0.attn", true), 0.2, "the rule's own final");
        assert_eq!(p.planned("blocks.0.ffn", false), 0.5);
        let mut s = State::fresh(contrai_recipe::Phase::Contract);
        s.segment.steps = 100;
        let order = p.order(&s, &r, None);
        assert_eq!(order.targets.len(), 3, "embeddings and the head are not selected");
        assert_eq!(order.targets["blocks.0.attn.query.weight"].cap, ATTENTION_CAP);
        let start = order.targets["blocks.0.ffn.up.weight"].sparsity;
        assert!((start - 0.1).abs() < 1e-12, "init at the start: {start}");
        s.contraction.frozen = vec!["blocks.0.ffn".into()];
        s.sparsity.insert("blocks.0.ffn".into(), 0.3);
        let t = p.order(&s, &r, Some(4)).targets["blocks.0.ffn.up.weight"];
        assert_eq!((t.sparsity, t.cap), (0.3, 0.3), "a frozen module holds");
    }

    #[test]
    fn heads_and_units_are_named_alike_in_every_engines_models() {
        let hf = [
            "l.0.attention.self.query.weight",
            "l.0.attention.output.dense.weight",
        ];
        let has = |p: &str| hf.contains(&p);
        let m = |p: &str| member_of(p, true, true, &has).map(|m| (m.whole, m.key, m.by_inputs));
        let q = "l.0.attention.self.query.weight".to_string();
        assert_eq!(
            m("l.0.attention.self.key.weight"),
            Some((Whole::Heads, q.clone(), false))
        );
        assert_eq!(
            m("l.0.attention.output.dense.weight"),
            Some((Whole::Heads, q, true))
        );
        let burn = |p: &str| p == "l.0.attention.self_attn.query.weight";
        let out = member_of("l.0.attention.output.dense.weight", true, false, &burn).unwrap();
        assert_eq!(out.key, "l.0.attention.self_attn.query.weight");
        assert!(member_of("l.0.attention.output.dense.weight", true, true, &|_| false).is_none());
        let up = "l.0.intermediate.dense.weight".to_string();
        assert_eq!(
            m("l.0.output.dense.weight"),
            Some((Whole::Units, up.clone(), true))
        );
        assert_eq!(
            m("l.0.intermediate.dense.weight"),
            Some((Whole::Units, up, false))
        );
        let up = "m.1.mlp.up_proj.weight".to_string();
        assert_eq!(
            m("m.1.mlp.gate_proj.weight"),
            Some((Whole::Units, up.clone(), false))
        );
        assert_eq!(m("m.1.mlp.down_proj.weight"), Some((Whole::Units, up, true)));
        let up = "blocks.2.ffn.up.weight".to_string();
        assert_eq!(m("blocks.2.ffn.down.weight"), Some((Whole::Units, up, true)));
        assert_eq!(m("blocks.2.attn.output.weight").map(|m| m.2), Some(true));
        assert_eq!(member_of("blocks.2.attn.value.weight", false, true, &has), None);
        assert_eq!(member_of("m.1.self_attn.q_proj.weight", true, true, &has), None);
        assert_eq!(m("blocks.2.ffn.up.bias"), None);
    }
}
