//! The measurements the conductor asks for before it decides: every training sample's loss (the
//! noisy-sample policy), each module's pruning sensitivity and the planned sparsities' joint
//! cost (diagnose). Each prunes a copy; the model itself is untouched.

use std::collections::BTreeMap;

use burn::tensor::Device;
use contrai_lifecycle::Target;
use contrai_lifecycle::prune::{is_attention, module_of};
use contrai_recipe::PruneScope;

use crate::batch::Encoded;
use crate::evaluate::{eval_batches, evaluate};
use crate::model::{Classifier, per_sample_cross_entropy};
use crate::prune::{Masks, Structure, apply_masks, update_all};

/// The loss of every sample of `data` under `model` (no dropout), in row order.
pub fn per_sample_losses(model: &Classifier, data: &Encoded, batch: usize, device: &Device) -> Vec<f32> {
    let mut out = Vec::with_capacity(data.len());
    for b in eval_batches(data, batch, device) {
        let losses = per_sample_cross_entropy(model.forward(&b, None), b.labels());
        out.extend(losses.into_data().try_to_vec::<f32>().unwrap_or_default());
    }
    out
}

/// `model` with each module of `sparsity` pruned to its share (by magnitude, or in the groups of
/// `structure`), on a copy.
pub fn pruned(model: &Classifier, sparsity: &BTreeMap<String, f64>, structure: Structure) -> Classifier {
    let mut masks = Masks::default();
    let target = |p: &str| sparsity.get(&module_of(p)).map(|&s| Target::uncapped(s));
    update_all(model, &mut masks, &target, PruneScope::Module, structure);
    apply_masks(model.clone(), &masks)
}

/// The validation loss of each of `modules` pruned alone to each of `levels` (in the groups of
/// `structure`).
pub fn sensitivity(
    model: &Classifier,
    val: &Encoded,
    (batch, device): (usize, &Device),
    modules: &[String],
    levels: &[f64],
    structure: Structure,
) -> BTreeMap<String, Vec<f32>> {
    modules
        .iter()
        .map(|module| {
            let structure = Structure {
                heads: structure.heads.filter(|_| is_attention(module)),
                ..structure
            };
            let losses = levels
                .iter()
                .map(|&level| {
                    let alone = BTreeMap::from([(module.clone(), level)]);
                    evaluate(&pruned(model, &alone, structure), val, batch, device).0
                })
                .collect();
            (module.clone(), losses)
        })
        .collect()
}

/// The validation loss with every module of `sparsity` pruned at once.
pub fn joint(
    model: &Classifier,
    val: &Encoded,
    (batch, device): (usize, &Device),
    sparsity: &BTreeMap<String, f64>,
    structure: Structure,
) -> f32 {
    evaluate(&pruned(model, sparsity, structure), val, batch, device).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> (Classifier, Encoded, Device) {
        let device = Device::flex();
        let spec = contrai_recipe::recipe::Model {
            vocab: 64,
            seq_len: 8,
            d_model: 16,
            layers: 1,
            heads: 2,
            ffn: 32,
            ..Default::default()
        };
        let model = Classifier::new(&spec, 2, 0, 5, &device).unwrap();
        let val = Encoded {
            inputs: crate::batch::Inputs::Tokens((0..8 * 40).map(|i| i * 7 % 63 + 1).collect()),
            labels: (0..40).map(|i| i % 2).collect(),
            width: 8,
        };
        (model, val, device)
    }

    #[test]
    fn pruning_nothing_costs_nothing_and_each_level_is_measured() {
        let (model, val, device) = tiny();
        let (base, _) = evaluate(&model, &val, 16, &device);
        let modules = vec!["blocks.0.attn".to_string(), "blocks.0.ffn".to_string()];
        let s = sensitivity(
            &model,
            &val,
            (16, &device),
            &modules,
            &[0.0, 0.5],
            Structure::default(),
        );
        assert_eq!(s.len(), 2);
        for losses in s.values() {
            assert_eq!(losses.len(), 2);
            assert!((losses[0] - base).abs() < 1e-6, "0 % pruned is the model itself");
        }
        let none = BTreeMap::from([("blocks.0.ffn".to_string(), 0.0)]);
        assert!((joint(&model, &val, (16, &device), &none, Structure::default()) - base).abs() < 1e-6);
    }

    #[test]
    fn whole_heads_are_pruned_for_attention_when_asked() {
        let (model, _, _) = tiny();
        let half = BTreeMap::from([("blocks.0.attn".to_string(), 0.5)]);
        let by_heads = pruned(&model, &half, Structure::new(Some(2), false));
        let w = crate::prune::weights(&by_heads, &|p| p == "blocks.0.attn.query.weight");
        let (_, [rows, cols], v) = &w[0];
        let dk = cols / 2;
        let dead: Vec<bool> = (0..2)
            .map(|h| (0..*rows).all(|r| (h * dk..(h + 1) * dk).all(|c| v[r * cols + c] == 0.0)))
            .collect();
        assert_eq!(
            dead.iter().filter(|d| **d).count(),
            1,
            "one of two heads gone: {dead:?}"
        );
    }
}
