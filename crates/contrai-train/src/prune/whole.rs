//! Pruning by whole groups: attention heads (a head's query/key/value columns with its rows of the
//! output projection) and feed-forward units (an expansion column with its projection row),
//! scored by L2 norm and masked together.

use burn::module::Module;
use contrai_lifecycle::Target;
use contrai_lifecycle::prune_policy::{member_of, module_of};

use super::{Masks, Matrix, weights};

/// What is pruned whole rather than by single weights.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Structure {
    /// Attention by whole heads, of this many a module.
    pub heads: Option<usize>,
    /// Feed-forward layers by whole units.
    pub units: bool,
}

impl Structure {
    /// The structure a pruning order (or measurement request) asks for.
    pub fn new(heads: Option<usize>, units: bool) -> Self {
        Structure { heads, units }
    }

    /// The structures pruned whole, heads first.
    pub(super) fn wholes(self) -> Vec<Whole> {
        self.heads
            .map(Whole::Heads)
            .into_iter()
            .chain(self.units.then_some(Whole::Units))
            .collect()
    }
}

/// A structure pruned as groups of rows or columns across the matrices that share them.
#[derive(Debug, Clone, Copy)]
pub(super) enum Whole {
    /// Attention heads, this many a module.
    Heads(usize),
    /// Feed-forward units: one expansion column (and its bias) with one projection row.
    Units,
}

impl Whole {
    /// The path whose pruning target decides the group `path` belongs to, and whether `path`'s
    /// groups are its rows (output projections: their inputs, in Burn's `[d_in, d_out]`) rather
    /// than its columns — the rule both engines share ([`member_of`]); `has` tells which
    /// matrices the model holds.
    pub(super) fn member(self, path: &str, has: &dyn Fn(&str) -> bool) -> Option<(String, bool)> {
        let heads = matches!(self, Whole::Heads(_));
        member_of(path, heads, !heads, has).map(|m| (m.key, m.by_inputs))
    }

    /// Groups of a structure whose column-owning matrices have `cols` columns.
    fn groups(self, cols: usize) -> usize {
        match self {
            Whole::Heads(h) => h,
            Whole::Units => cols,
        }
    }
}

/// Prunes whole groups (heads or units): in each structure `target` selects, the groups with the
/// smallest L2 norm over their columns and rows are masked, `floor(sparsity × groups)` of them
/// (capped), groups masked before first. Returns each structure's module with its sparsity.
/// `has` tells which matrices the model holds ([`super::matrix_paths`]).
pub(super) fn update_group_masks<M: Module>(
    model: &M,
    masks: &mut Masks,
    whole: Whole,
    target: &dyn Fn(&str) -> Option<Target>,
    has: &dyn Fn(&str) -> bool,
) -> Vec<(String, f64)> {
    let all = weights(model, &|p| {
        whole.member(p, has).is_some_and(|(k, _)| target(&k).is_some())
    });
    // Each matrix's structure and whether its groups are rows, worked out once.
    let all: Vec<(String, bool, &Matrix)> = all
        .iter()
        .filter_map(|m| whole.member(&m.0, has).map(|(k, rows)| (k, rows, m)))
        .collect();
    let keys: std::collections::BTreeSet<&str> = all.iter().map(|(k, ..)| k.as_str()).collect();
    let mut out = Vec::new();
    for key in keys {
        let members: Vec<(bool, &Matrix)> = all
            .iter()
            .filter(|(k, ..)| k == key)
            .map(|&(_, rows, m)| (rows, m))
            .collect();
        let (Some(t), Some(cols)) = (
            target(key),
            members.iter().find(|(rows, _)| !rows).map(|(_, m)| m.1[1]),
        ) else {
            continue;
        };
        let groups = whole.groups(cols).max(1);
        let width = (cols / groups).max(1);
        // Entry (r, c) of a [d_in, d_out] matrix belongs to group c / width, or r / width for a
        // matrix whose groups are rows.
        let group_of = |rows: bool, i: usize, cols: usize| {
            let (r, c) = (i / cols, i % cols);
            (if rows { r / width } else { c / width }).min(groups - 1)
        };
        let mut norm = vec![0f64; groups];
        let mut dead = vec![true; groups];
        for &(rows, (path, [_, cols], v)) in &members {
            let keep = masks.keep_flags(path, v.len());
            for (i, w) in v.iter().enumerate() {
                let g = group_of(rows, i, *cols);
                norm[g] += f64::from(*w) * f64::from(*w);
                dead[g] &= !keep[i];
            }
        }
        let pruned = contrai_lifecycle::select::weakest_groups(&norm, &dead, t);
        for &(rows, (path, [_, cols], v)) in &members {
            let keep: Vec<bool> = (0..v.len()).map(|i| !pruned[group_of(rows, i, *cols)]).collect();
            masks.set(path, &keep);
        }
        let module = module_of(key);
        let sparsity = masks.sparsity(&module).unwrap_or(0.0);
        out.push((module, sparsity));
    }
    out
}

/// [`update_group_masks`] for attention heads (tests name it).
#[cfg(test)]
fn update_head_masks<M: Module>(
    model: &M,
    masks: &mut Masks,
    heads: usize,
    target: &dyn Fn(&str) -> Option<Target>,
) -> Vec<(String, f64)> {
    let paths: std::collections::BTreeSet<String> = super::matrix_paths(model).into_iter().collect();
    update_group_masks(model, masks, Whole::Heads(heads), target, &|p| paths.contains(p))
}

#[cfg(test)]
mod tests {
    use super::super::module_masks;
    use super::super::scope_tests::{is_ffn, tiny};
    use super::*;
    use crate::model::Classifier;
    use burn::tensor::{Device, Tensor};

    /// Multiplies entry `i` (row-major) of `layer`'s weight by `factor(i)`.
    fn scale(layer: &mut burn::nn::Linear, factor: impl Fn(usize) -> f32) {
        let dims = layer.weight.dims();
        let f: Vec<f32> = (0..dims[0] * dims[1]).map(factor).collect();
        let device = Device::flex();
        layer.weight = layer
            .weight
            .clone()
            .map(|w| w * Tensor::<1>::from_floats(f.as_slice(), &device).reshape(dims));
    }

    #[test]
    fn whole_heads_go_together_weakest_first_and_stay_gone() {
        let mut model = tiny();
        let Classifier::Transformer(t) = &mut model else {
            unreachable!()
        };
        // Head 1 of block 0 (output columns 4..8 of the query) gets much larger weights.
        scale(
            &mut t.blocks[0].attn.query,
            |i| if i % 8 >= 4 { 10.0 } else { 1.0 },
        );
        let target = |p: &str| module_of(p).ends_with("attn").then_some(Target::uncapped(0.5));
        let mut masks = Masks::default();
        let got = update_head_masks(&model, &mut masks, 2, &target);
        assert_eq!(
            got,
            vec![
                ("blocks.0.attn".to_string(), 0.5),
                ("blocks.1.attn".to_string(), 0.5)
            ]
        );
        let keep_q = masks.keep_flags("blocks.0.attn.query.weight", 64);
        let keep_o = masks.keep_flags("blocks.0.attn.output.weight", 64);
        for i in 0..64 {
            assert_eq!(
                keep_q[i],
                i % 8 >= 4,
                "query column {} of the weak head 0 goes",
                i % 8
            );
            assert_eq!(keep_o[i], i / 8 >= 4, "output row {} of head 0 goes", i / 8);
        }
        // A later update at a lower target never revives a pruned head.
        let lower = |p: &str| module_of(p).ends_with("attn").then_some(Target::uncapped(0.0));
        update_head_masks(&model, &mut masks, 2, &lower);
        assert_eq!(masks.keep_flags("blocks.0.attn.query.weight", 64), keep_q);
        // 0.4 of 2 heads rounds down to none: single heads are not split.
        let mut none = Masks::default();
        let few = |p: &str| module_of(p).ends_with("attn").then_some(Target::uncapped(0.4));
        update_head_masks(&model, &mut none, 2, &few);
        assert_eq!(none.overall(), 0.0);
    }

    #[test]
    fn whole_units_go_with_their_projection_rows_weakest_first() {
        let mut model = tiny();
        let Classifier::Transformer(t) = &mut model else {
            unreachable!()
        };
        // Units 0..8 of block 0's 16 get projection rows 10x larger: the other 8 go first.
        scale(&mut t.blocks[0].ffn.down, |i| if i / 8 < 8 { 10.0 } else { 1.0 });
        let target = |p: &str| is_ffn(p).then_some(Target::uncapped(0.5));
        let masks = module_masks(&model, &target, Structure::new(None, true));
        for b in 0..2 {
            let up = masks.keep_flags(&format!("blocks.{b}.ffn.up.weight"), 8 * 16);
            let down = masks.keep_flags(&format!("blocks.{b}.ffn.down.weight"), 16 * 8);
            let kept_units: Vec<usize> = (0..16).filter(|&u| up[u]).collect();
            assert_eq!(kept_units.len(), 8, "half of block {b}'s units stay");
            for u in 0..16 {
                let col = (0..8).all(|r| up[r * 16 + u] == up[u]);
                let row = (0..8).all(|c| down[u * 8 + c] == up[u]);
                assert!(col && row, "unit {u}: its column and its row go together");
            }
            if b == 0 {
                assert_eq!(kept_units, (0..8).collect::<Vec<_>>(), "the strong units stay");
            }
        }
        // Attention is left to single-weight magnitude pruning when it has a target.
        assert!(masks.sparsity("blocks.0.attn").is_none());
    }

    #[test]
    fn bert_units_are_intermediate_columns_with_output_rows_not_attention_output() {
        let model = crate::pretrained::fixture(&Device::flex());
        let target = |p: &str| {
            let m = module_of(p);
            (m.ends_with("intermediate") || m.ends_with("output")).then_some(Target::uncapped(0.25))
        };
        let masks = module_masks(&model, &target, Structure::new(None, true));
        let at = |n: &str| format!("bert.encoder.layer.0.{n}.weight");
        let w = weights(&model, &|p| {
            p == at("intermediate.dense") || p == at("output.dense")
        });
        let [h, f] = w[0].1;
        let up = masks.keep_flags(&at("intermediate.dense"), h * f);
        let down = masks.keep_flags(&at("output.dense"), f * h);
        let gone: Vec<usize> = (0..f).filter(|&u| !up[u]).collect();
        assert_eq!(gone.len(), f / 4, "a quarter of {f} units");
        for &u in &gone {
            assert!((0..h).all(|r| !up[r * f + u]) && (0..h).all(|c| !down[u * h + c]));
        }
        // The attention's output projection is pruned by magnitude, not as units.
        let attn_out = masks.keep_flags(&at("attention.output.dense"), h * h);
        let zeros = attn_out.iter().filter(|k| !**k).count();
        assert!(zeros > 0 && zeros < h * h / 2, "{zeros} of {}", h * h);
    }

    #[test]
    fn a_bert_encoders_heads_go_with_their_output_projection_rows_not_by_magnitude() {
        let model = crate::pretrained::fixture(&Device::flex());
        // Half of each layer's 4 heads; every output projection also under a 0.3 magnitude rule,
        // which the attention's does not follow (its heads decide).
        let target = |p: &str| {
            let m = module_of(p);
            let t = if m.ends_with("self_attn") { 0.5 } else { 0.3 };
            (m.ends_with("self_attn") || m.ends_with("output")).then_some(Target::uncapped(t))
        };
        let masks = module_masks(&model, &target, Structure::new(Some(4), false));
        for l in 0..2 {
            let at = |n: &str| format!("bert.encoder.layer.{l}.{n}.weight");
            let q = masks.keep_flags(&at("attention.self_attn.query"), 32 * 32);
            let o = masks.keep_flags(&at("attention.output.dense"), 32 * 32);
            // Columns (q) and rows (o) of a head go together: heads of 8 dims, 2 of 4 gone.
            let gone: Vec<usize> = (0..4).filter(|h| !q[h * 8]).collect();
            assert_eq!(gone.len(), 2, "layer {l}");
            for i in 0..32 * 32 {
                let (r, c) = (i / 32, i % 32);
                assert_eq!(q[i], !gone.contains(&(c / 8)), "layer {l} query ({r}, {c})");
                assert_eq!(o[i], !gone.contains(&(r / 8)), "layer {l} output ({r}, {c})");
            }
            for n in ["attention.self_attn.key", "attention.self_attn.value"] {
                assert_eq!(masks.keep_flags(&at(n), 32 * 32), q, "{n}");
            }
            // The feed-forward output follows its magnitude rule.
            let ffn = masks.keep_flags(&at("output.dense"), 64 * 32);
            let share = ffn.iter().filter(|k| !**k).count() as f64 / ffn.len() as f64;
            assert!((share - 0.3).abs() < 0.01, "layer {l}: {share}");
        }
    }
}
