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
}
