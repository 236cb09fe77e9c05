//! The measurements the conductor asks for before it decides: every training sample's loss (the
//! noisy-sample policy), each module's pruning sensitivity and the planned sparsities' joint
//! cost (diagnose). Each prunes a copy; the model itself is untouched.

use std::borrow::Cow;
use std::collections::BTreeMap;

use burn::optim::GradientsParams;
use burn::tensor::Device;
use contrai_lifecycle::Target;
use contrai_lifecycle::prune_policy::{is_attention, module_of};
use contrai_lifecycle::sensitivity::relative_increase;
use contrai_recipe::PruneScope;

use crate::batch::Encoded;
use crate::evaluate::{eval_batches, evaluate};
use crate::model::{Batch, Classifier, per_sample_cross_entropy};
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
    let val = &*spread(val, scan.samples);
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
            let line = heard(
                (module, "", val.len()),
                (scan.levels, &losses, base),
                (i, modules.len()),
            );
            progress(line);
            (module.clone(), losses)
        })
        .collect();
    (losses, base)
}

/// A weight matrix of a scanned module: its values and, for each weight, the index of the first
/// level that removes it (the levels nest: a higher one removes what a lower one did).
struct Removal {
    path: String,
    module: usize,
    weights: Vec<f32>,
    first_level: Vec<f32>,
}

/// The line a scanned module gives: "diagnose: M pruned alone on 40 validation samples: 10 %
/// +0.4 %, 20 % +1.1 % (2 of 8)", each level with its loss's rise over `base`.
fn heard(
    (module, how, samples): (&str, &str, usize),
    (levels, losses, base): (&[f64], &[f32], f32),
    (i, of): (usize, usize),
) -> String {
    let rise =
        |(l, &v): (&f64, &f32)| format!("{:.0} % {:+.1} %", 100.0 * l, 100.0 * relative_increase(v, base));
    let rises: Vec<String> = levels.iter().zip(losses).map(rise).collect();
    format!(
        "diagnose: {module} pruned alone{how} on {samples} validation samples: {} ({} of {of})",
        rises.join(", "),
        i + 1
    )
}

/// The matrices of `modules` and the level at which each of their weights goes, as [`pruned`]
/// would remove it.
fn removals(model: &Classifier, modules: &[String], scan: &Scan) -> Vec<Removal> {
    let mut out: Vec<Removal> = Vec::new();
    for (m, module) in modules.iter().enumerate() {
        let structure = Structure {
            heads: scan.structure.heads.filter(|_| is_attention(module)),
            ..scan.structure
        };
        let first = out.len();
        for (path, _, weights) in crate::prune::weights(model, &|p| module_of(p) == *module) {
            let first_level = vec![f32::INFINITY; weights.len()];
            out.push(Removal {
                path,
                module: m,
                weights,
                first_level,
            });
        }
        for (l, &level) in scan.levels.iter().enumerate().rev() {
            let mut masks = Masks::default();
            let target = |p: &str| (module_of(p) == *module).then(|| Target::uncapped(level));
            update_all(model, &mut masks, &target, PruneScope::Module, structure);
            for r in &mut out[first..] {
                let keep = masks.keep_flags(&r.path, r.weights.len());
                for (code, kept) in r.first_level.iter_mut().zip(keep) {
                    if !kept {
                        *code = l as f32;
                    }
                }
            }
        }
    }
    out
}

/// For each level, Σ g·w over the weights whose first removing level is at most it. Blocks that
/// stay in cache are summed for every level in f32 lanes (branch-free, independent lanes
/// vectorize; a single running sum would not), the blocks' totals in f64.
fn removed_dots(g: &[f32], w: &[f32], first_level: &[f32], levels: usize) -> Vec<f64> {
    const LANES: usize = 16;
    const BLOCK: usize = 4096;
    let mut totals = vec![0f64; levels];
    for ((g, w), l) in g
        .chunks(BLOCK)
        .zip(w.chunks(BLOCK))
        .zip(first_level.chunks(BLOCK))
    {
        let ((gc, gt), (wc, wt), (lc, lt)) = (
            g.as_chunks::<LANES>(),
            w.as_chunks::<LANES>(),
            l.as_chunks::<LANES>(),
        );
        for (level, total) in totals.iter_mut().enumerate() {
            let level = level as f32;
            let term = |g: f32, w: f32, l: f32| {
                let p = g * w;
                if l <= level { p } else { 0.0 }
            };
            let mut acc = [0f32; LANES];
            for ((g, w), l) in gc.iter().zip(wc).zip(lc) {
                for k in 0..LANES {
                    acc[k] += term(g[k], w[k], l[k]);
                }
            }
            let tail: f32 = (gt.iter().zip(wt).zip(lt))
                .map(|((&g, &w), &l)| term(g, w, l))
                .sum();
            *total += f64::from(acc.iter().sum::<f32>() + tail);
        }
    }
    totals
}

/// Cross-entropy of `logits` moved by `moves` (none: not moved) for class `label`.
fn moved_cross_entropy(logits: &[f32], moves: &[f64], label: usize) -> f64 {
    let moved = |(c, &z): (usize, &f32)| f64::from(z) + moves.get(c).copied().unwrap_or(0.0);
    let z: Vec<f64> = logits.iter().enumerate().map(moved).collect();
    let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = z.iter().map(|v| (v - max).exp()).sum();
    max + sum.ln() - z[label]
}

/// One sample's logits and, by module and level, how far removing the level's weights moves each
/// logit to first order (class 0 held still: cross-entropy depends on the margins only).
fn margin_moves(
    model: &Classifier,
    b: &Batch,
    removals: &[Removal],
    (modules, levels): (usize, usize),
) -> (Vec<f32>, Vec<Vec<Vec<f64>>>) {
    let classes = model.classes();
    let mut moves = vec![vec![vec![0f64; classes]; levels]; modules];
    let mut logits = Vec::new();
    let scanned = |p: &str| removals.iter().any(|r| r.path == p);
    for c in 1..classes {
        // A backward pass spends its graph: each margin takes its own forward.
        let z = model.forward(b, None);
        if logits.is_empty() {
            logits = z.clone().into_data().try_to_vec::<f32>().unwrap_or_default();
        }
        let margin = z.clone().narrow(1, c, 1) - z.narrow(1, 0, 1);
        let grads = GradientsParams::from_grads(margin.sum().backward(), model);
        for (path, _, g) in crate::prune::gradients(model, &grads, &scanned) {
            let Some(r) = removals.iter().find(|r| r.path == path) else {
                continue;
            };
            // Removing w moves the margin by −g·w.
            let dots = removed_dots(&g, &r.weights, &r.first_level, levels);
            for (m, dot) in moves[r.module].iter_mut().zip(dots) {
                m[c] -= dot;
            }
        }
    }
    (logits, moves)
}

/// The validation loss of each of `modules` pruned alone to each of the scan's levels, estimated
/// on its samples without evaluating a pruned copy: for each sample (one at a time, `model` on
/// the autodiff `device`), the gradient of every logit's margin over class 0, times the weights a
/// level removes, is how far that level moves the margin; the cross-entropy of the moved logits
/// is the level's loss. One forward and one backward a sample and margin pay for every module
/// and level at once (the linearization holds the rest of the network's response fixed; the
/// joint check evaluates for real). `progress` hears one line a module at the end.
pub fn linearized(
    model: &Classifier,
    val: &Encoded,
    device: &Device,
    modules: &[String],
    scan: Scan,
    progress: &mut dyn FnMut(String),
) -> Scanned {
    let val = &*spread(val, scan.samples);
    let removals = removals(model, modules, &scan);
    let scanned = |p: &str| removals.iter().any(|r| r.path == p);
    let model = &crate::prune::tracking_only(model.clone(), &scanned);
    let levels = scan.levels.len();
    let mut base = 0f64;
    let mut sums = vec![vec![0f64; levels]; modules.len()];
    progress(format!(
        "diagnose: estimating {} modules at {levels} levels from {} validation samples' logit gradients, one sample at a time",
        modules.len(),
        val.len()
    ));
    for row in 0..val.len() {
        let label = val.labels[row] as usize;
        let (logits, moves) = margin_moves(
            model,
            &val.batch(&[row], device),
            &removals,
            (modules.len(), levels),
        );
        base += moved_cross_entropy(&logits, &[], label);
        for (sum, moved) in sums.iter_mut().zip(&moves) {
            for (s, m) in sum.iter_mut().zip(moved) {
                *s += moved_cross_entropy(&logits, m, label);
            }
        }
    }
    let n = val.len().max(1) as f64;
    let base = (base / n) as f32;
    let losses = modules
        .iter()
        .zip(sums)
        .enumerate()
        .map(|(i, (module, sum))| {
            let losses: Vec<f32> = sum.iter().map(|s| (s / n) as f32).collect();
            let line = heard(
                (module, ", estimated", val.len()),
                (scan.levels, &losses, base),
                (i, modules.len()),
            );
            progress(line);
            (module.clone(), losses)
        })
        .collect();
    (losses, base)
}

/// `n` of `data`'s samples spread evenly over it (None, or `n` at least all: all of them; the
/// split's order mixes nothing: a file sorted by label stays represented).
fn spread(data: &Encoded, n: Option<usize>) -> Cow<'_, Encoded> {
    match n.filter(|&n| n < data.len()) {
        Some(n) => Cow::Owned(data.subset(&(0..n).map(|i| i * data.len() / n).collect::<Vec<_>>())),
        None => Cow::Borrowed(data),
    }
}

/// The validation loss with every module of `sparsity` pruned at once, on `samples` evenly
/// spread samples (None: all).
pub fn joint(
    model: &Classifier,
    val: &Encoded,
    (batch, device): (usize, &Device),
    sparsity: &BTreeMap<String, f64>,
    (structure, samples): (Structure, Option<usize>),
) -> f32 {
    let val = &*spread(val, samples);
    evaluate(&pruned(model, sparsity, structure), val, batch, device).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> (Classifier, Encoded, Device) {
        tiny_on(2, Device::flex())
    }

    /// A one-block transformer of `classes` classes on `device` and 40 validation samples.
    fn tiny_on(classes: usize, device: Device) -> (Classifier, Encoded, Device) {
        let spec = contrai_recipe::recipe::Model {
            vocab: 64,
            seq_len: 8,
            d_model: 16,
            layers: 1,
            heads: 2,
            ffn: 32,
            ..Default::default()
        };
        let model = Classifier::new(&spec, classes, 0, 5, &device).unwrap();
        let val = Encoded {
            inputs: crate::batch::Inputs::Tokens((0..8 * 40).map(|i| i * 7 % 63 + 1).collect()),
            labels: (0..40).map(|i| i % classes as i32).collect(),
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
        assert!(
            (joint(&model, &val, (16, &device), &none, (Structure::default(), None)) - base).abs() < 1e-6
        );
    }

    #[test]
    fn a_linearized_scan_estimates_what_evaluating_the_pruned_copies_measures() {
        // Three classes: two margins, two backward passes a sample.
        let (model, val, device) = tiny_on(3, Device::flex().autodiff());
        let modules = vec!["blocks.0.attn".to_string(), "blocks.0.ffn".to_string()];
        let scan = Scan {
            levels: &[0.0, 0.1, 0.3, 0.5],
            samples: Some(20),
            stop_above: None,
            structure: Structure::default(),
        };
        let mut heard = Vec::new();
        let (est, base) = linearized(&model, &val, &device, &modules, scan, &mut |l| heard.push(l));
        let plain = Device::flex();
        let (got, on_scan) = sensitivity(
            &burn::module::Module::valid(&model),
            &val,
            (16, &plain),
            &modules,
            scan,
            &mut |_| {},
        );
        assert!(
            (base - on_scan).abs() < 1e-5,
            "the same samples' unpruned loss: {base} vs {on_scan}"
        );
        assert_eq!(heard.len(), 3, "the start, then a line a module");
        assert!(heard[2].starts_with(
            "diagnose: blocks.0.ffn pruned alone, estimated on 20 validation samples: 0 % +0.0 %"
        ));
        for m in &modules {
            assert_eq!(est[m][0], base, "{m}: level 0 removes nothing");
            // Up to 30 % the linearization holds within a factor of two (the tiny model's own
            // figures: within 3 % at 10 %); at 50 % attention's softmax bends away from it, which
            // is what the joint check is for.
            for (l, (e, g)) in est[m].iter().zip(&got[m]).enumerate().take(3).skip(1) {
                let (de, dg) = (e - base, g - base);
                assert!(dg > 1e-4, "{m} level {l}: pruning raises the loss ({dg})");
                assert!(
                    (0.5..=2.0).contains(&(de / dg)),
                    "{m} level {l}: estimated {de:+.6} vs measured {dg:+.6}"
                );
            }
        }
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
