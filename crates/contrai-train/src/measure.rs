//! The measurements the conductor asks for before it decides: every training sample's loss (the
//! noisy-sample policy), each module's pruning sensitivity and the planned sparsities' joint
//! cost (diagnose). Each prunes a copy; the model itself is untouched.

use std::collections::BTreeMap;

use burn::tensor::Device;
use contrai_lifecycle::Target;
use contrai_lifecycle::prune::{is_attention, module_of};
use contrai_lifecycle::sensitivity::relative_increase;
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

/// How diagnose's sensitivity scan is measured (the conductor's `MeasureSensitivity`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Scan<'a> {
    /// Shares of each module's weights to zero, rising.
    pub levels: &'a [f64],
    /// Validation samples to evaluate on, evenly spread (None: all).
    pub samples: Option<usize>,
    /// A module's levels stop after the first whose loss rises more than this share.
    pub stop_above: Option<f64>,
    /// The groups pruning takes.
    pub structure: Structure,
}

/// The scan's measurements: each module's loss at each level measured, and the unpruned loss on
/// the same samples.
pub type Scanned = (BTreeMap<String, Vec<f32>>, f32);

/// The validation loss of each of `modules` pruned alone to each of the scan's levels, on its
/// samples; `progress` hears a line for each module as it is measured.
pub fn sensitivity(
    model: &Classifier,
    val: &Encoded,
    (batch, device): (usize, &Device),
    modules: &[String],
    scan: Scan,
    progress: &mut dyn FnMut(String),
) -> Scanned {
    let subset = scan.samples.filter(|&n| n < val.len()).map(|n| spread(val, n));
    let val = subset.as_ref().unwrap_or(val);
    let base = evaluate(model, val, batch, device).0;
    let losses = modules
        .iter()
        .enumerate()
        .map(|(i, module)| {
            let structure = Structure {
                heads: scan.structure.heads.filter(|_| is_attention(module)),
                ..scan.structure
            };
            let mut losses = Vec::with_capacity(scan.levels.len());
            for &level in scan.levels {
                let alone = BTreeMap::from([(module.clone(), level)]);
                let loss = evaluate(&pruned(model, &alone, structure), val, batch, device).0;
                losses.push(loss);
                if scan.stop_above.is_some_and(|t| relative_increase(loss, base) > t) {
                    break;
                }
            }
            let rises: Vec<String> = (scan.levels.iter().zip(&losses))
                .map(|(l, &v)| format!("{:.0} % {:+.1} %", 100.0 * l, 100.0 * relative_increase(v, base)))
                .collect();
            progress(format!(
                "diagnose: {module} pruned alone on {} validation samples: {} ({} of {})",
                val.len(),
                rises.join(", "),
                i + 1,
                modules.len()
            ));
            (module.clone(), losses)
        })
        .collect();
    (losses, base)
}

/// `n` of `data`'s samples spread evenly over it (the split's order mixes nothing: a file sorted
/// by label stays represented).
fn spread(data: &Encoded, n: usize) -> Encoded {
    let rows: Vec<usize> = (0..n).map(|i| i * data.len() / n).collect();
    data.subset(&rows)
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
        let scan = Scan {
            levels: &[0.0, 0.5],
            ..Scan::default()
        };
        let mut heard = Vec::new();
        let (s, on_scan) = sensitivity(&model, &val, (16, &device), &modules, scan, &mut |l| {
            heard.push(l)
        });
        assert_eq!(on_scan, base, "the whole set: its loss is the evaluation's");
        assert_eq!(heard.len(), 2);
        assert!(
            heard[1].starts_with(
                "diagnose: blocks.0.ffn pruned alone on 40 validation samples: 0 % +0.0 %, 50 % "
            ),
            "{}",
            heard[1]
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
    fn a_scan_on_a_subsample_measures_its_own_base_and_stops_a_module_early() {
        let (model, val, device) = tiny();
        let modules = vec!["blocks.0.ffn".to_string()];
        let scan = |stop_above| Scan {
            levels: &[0.0, 0.5, 0.9],
            samples: Some(10),
            stop_above,
            structure: Structure::default(),
        };
        let (s, on_scan) = sensitivity(&model, &val, (16, &device), &modules, scan(None), &mut |_| {});
        let rows: Vec<usize> = (0..10).map(|i| i * 4).collect();
        let (sub, _) = evaluate(&model, &val.subset(&rows), 16, &device);
        assert_eq!(on_scan, sub, "the unpruned loss on the same ten samples");
        assert_eq!(s["blocks.0.ffn"].len(), 3);
        assert!((s["blocks.0.ffn"][0] - sub).abs() < 1e-6);
        // Any rise above −100 % stops after the first level.
        let (s, _) = sensitivity(
            &model,
            &val,
            (16, &device),
            &modules,
            scan(Some(-1.0)),
            &mut |_| {},
        );
        assert_eq!(s["blocks.0.ffn"].len(), 1);
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
