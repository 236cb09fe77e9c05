//! Pruned structure removed for real. An attention head whose output-projection rows are all zero
//! contributes nothing, whatever its query, key and value; so does a feed-forward unit whose
//! projection row is all zero. `compact` takes them out of the transformer's matrices — the
//! exported model is smaller and faster and computes the same outputs — and `shaped_as_file`
//! builds a skeleton of a compacted file's shapes for loading it.
//!
//! Single-weight (unstructured) sparsity leaves dense matrices as they are: same size, same speed.

use std::io::Read;
use std::path::Path;

use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::{Int, Tensor, TensorData};

use crate::error::{Result, record_err};
use crate::model::{Block, Classifier};
use crate::prune::Structure;

/// What compaction removed from a model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    /// Attention heads removed, and heads there were.
    pub heads: (usize, usize),
    /// Feed-forward units removed, and units there were.
    pub units: (usize, usize),
}

impl Removed {
    /// In words, for the model card; `None` when nothing was removed.
    pub fn note(&self) -> Option<String> {
        let ((h, of_h), (u, of_u)) = (self.heads, self.units);
        (h + u > 0).then(|| {
            format!(
                "{h} of {of_h} attention heads and {u} of {of_u} feed-forward units removed from the matrices"
            )
        })
    }
}

/// `model` with every head (when `structure` prunes heads) and feed-forward unit (when it prunes
/// units) that contributes nothing removed (Contrai's transformer; other models are returned as
/// they are). Each block keeps at least one head and one unit, so that no matrix is empty. Only
/// what was pruned whole is removed: a row that single-weight pruning happened to empty stays.
pub fn compact(model: Classifier, structure: Structure) -> (Classifier, Removed) {
    let Classifier::Transformer(mut t) = model else {
        return (model, Removed::default());
    };
    let mut removed = Removed::default();
    t.blocks = t
        .blocks
        .into_iter()
        .map(|mut b| {
            if structure.heads.is_some() {
                b = compact_heads(b, &mut removed);
            }
            if structure.units {
                b = compact_units(b, &mut removed);
            }
            b
        })
        .collect();
    (Classifier::Transformer(t), removed)
}

fn compact_heads(mut block: Block, removed: &mut Removed) -> Block {
    let heads = block.attn.heads;
    let inner = block.attn.query.weight.dims()[1];
    let dk = inner / heads.max(1);
    let live = live_row_groups(&block.attn.output.weight.val(), dk);
    removed.heads.0 += heads - live.len();
    removed.heads.1 += heads;
    if live.len() < heads {
        let cols: Vec<usize> = live.iter().flat_map(|&h| h * dk..(h + 1) * dk).collect();
        let a = &mut block.attn;
        let idx = index(&cols, &a.query.weight.val());
        a.query = select(&a.query, &idx, Part::Columns);
        a.key = select(&a.key, &idx, Part::Columns);
        a.value = select(&a.value, &idx, Part::Columns);
        a.output = select(&a.output, &idx, Part::Rows);
        a.heads = live.len();
    }
    block
}

fn compact_units(mut block: Block, removed: &mut Removed) -> Block {
    let units = block.ffn.down.weight.dims()[0];
    let live = live_row_groups(&block.ffn.down.weight.val(), 1);
    removed.units.0 += units - live.len();
    removed.units.1 += units;
    if live.len() < units {
        let f = &mut block.ffn;
        let idx = index(&live, &f.up.weight.val());
        f.up = select(&f.up, &idx, Part::Columns);
        f.down = select(&f.down, &idx, Part::Rows);
    }
    block
}

/// The groups of `width` consecutive rows of `w` that hold a nonzero entry (at least group 0).
fn live_row_groups(w: &Tensor<2>, width: usize) -> Vec<usize> {
    let [rows, cols] = w.dims();
    let v: Vec<f32> = w.to_data().try_to_vec().unwrap_or_default();
    let live: Vec<usize> = (0..rows / width.max(1))
        .filter(|g| {
            v[g * width * cols..(g + 1) * width * cols]
                .iter()
                .any(|x| *x != 0.0)
        })
        .collect();
    if live.is_empty() { vec![0] } else { live }
}

fn index(i: &[usize], like: &Tensor<2>) -> Tensor<1, Int> {
    let v: Vec<i64> = i.iter().map(|&i| i as i64).collect();
    Tensor::from_data(TensorData::new(v, [i.len()]), &like.device())
}

/// Which side of a `[d_in, d_out]` linear layer a selection keeps.
#[derive(Clone, Copy)]
enum Part {
    /// Output features (weight columns and bias entries).
    Columns,
    /// Input features (weight rows; the bias stays).
    Rows,
}

fn select(l: &Linear, idx: &Tensor<1, Int>, part: Part) -> Linear {
    let w = l.weight.val();
    match part {
        Part::Columns => Linear {
            weight: Param::from_tensor(w.select(1, idx.clone())),
            bias: l
                .bias
                .as_ref()
                .map(|b| Param::from_tensor(b.val().select(0, idx.clone()))),
        },
        Part::Rows => Linear {
            weight: Param::from_tensor(w.select(0, idx.clone())),
            bias: l.bias.as_ref().map(|b| Param::from_tensor(b.val())),
        },
    }
}

/// `model` (a skeleton of the recipe's shape) with each transformer block sized as in the
/// safetensors file `path`: fewer heads and units where `compact` removed some. Other models,
/// and blocks of the recipe's own size, are returned as they are.
pub fn shaped_as_file(model: Classifier, path: &Path) -> Result<Classifier> {
    let Classifier::Transformer(mut t) = model else {
        return Ok(model);
    };
    let shapes = safetensors_shapes(path)?;
    let width = |name: &str| -> Result<Option<usize>> {
        match shapes.get(name) {
            None => Ok(None),
            Some(s) if s.len() == 2 => Ok(Some(s[1])),
            Some(s) => Err(record_err(
                path,
                format!("{name} has shape {s:?}, a matrix expected"),
            )),
        }
    };
    for (i, block) in t.blocks.iter_mut().enumerate() {
        let a = &mut block.attn;
        let dk = a.query.weight.dims()[1] / a.heads.max(1);
        if let Some(inner) = width(&format!("blocks.{i}.attn.query.weight"))? {
            if inner == 0 || inner % dk != 0 {
                let m = format!("blocks.{i}.attn.query.weight has {inner} columns, not whole heads of {dk}");
                return Err(record_err(path, m));
            }
            a.heads = inner / dk;
            a.query = resized(&a.query, Part::Columns, inner);
            a.key = resized(&a.key, Part::Columns, inner);
            a.value = resized(&a.value, Part::Columns, inner);
            a.output = resized(&a.output, Part::Rows, inner);
        }
        if let Some(units) = width(&format!("blocks.{i}.ffn.up.weight"))? {
            block.ffn.up = resized(&block.ffn.up, Part::Columns, units);
            block.ffn.down = resized(&block.ffn.down, Part::Rows, units);
        }
    }
    Ok(Classifier::Transformer(t))
}

/// A zero linear layer like `l` with `n` output features (`Columns`) or input features (`Rows`).
fn resized(l: &Linear, part: Part, n: usize) -> Linear {
    let [d_in, d_out] = l.weight.dims();
    let device = l.weight.device();
    let shape = match part {
        Part::Columns => [d_in, n],
        Part::Rows => [n, d_out],
    };
    Linear {
        weight: Param::from_tensor(Tensor::zeros(shape, &device)),
        bias: l.bias.as_ref().map(|b| {
            let len = if matches!(part, Part::Columns) {
                n
            } else {
                b.dims()[0]
            };
            Param::from_tensor(Tensor::zeros([len], &device))
        }),
    }
}

/// The tensors' shapes in the header of safetensors file `path` (8 bytes of header length, then
/// the JSON header), without reading the weights.
/// (The `safetensors` crate's `read_metadata` wants the whole file in memory, and `predict` reads
/// the file again right after.)
fn safetensors_shapes(path: &Path) -> Result<std::collections::BTreeMap<String, Vec<usize>>> {
    let bad = |m: String| record_err(path, m);
    let mut f = std::fs::File::open(path).map_err(|e| crate::TrainError::io(path, e))?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len)
        .map_err(|e| bad(format!("no safetensors header: {e}")))?;
    let len = u64::from_le_bytes(len);
    let size = f.metadata().map_or(0, |m| m.len());
    if len > size.saturating_sub(8) || len > 100 << 20 {
        return Err(bad(format!(
            "a safetensors header of {len} bytes does not fit the file"
        )));
    }
    let mut header = vec![0u8; len as usize];
    f.read_exact(&mut header).map_err(|e| bad(e.to_string()))?;
    #[derive(serde::Deserialize)]
    struct Entry {
        shape: Vec<usize>,
    }
    let map: std::collections::BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| bad(format!("safetensors header: {e}")))?;
    map.into_iter()
        .filter(|(k, _)| k != "__metadata__")
        .map(|(k, v)| {
            let e: Entry = serde_json::from_value(v).map_err(|e| bad(format!("{k}: {e}")))?;
            Ok((k, e.shape))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Batch, TextBatch};
    use crate::prune::{apply_masks, module_masks};
    use burn::module::Module;
    use burn::tensor::Device;
    use contrai_lifecycle::Target;
    use contrai_lifecycle::prune_policy::module_of;

    fn logits(model: &Classifier, device: &Device) -> Vec<f32> {
        let seq = 16;
        let ids: Vec<i32> = (0..3 * seq as i32)
            .map(|i| if i % 13 == 12 { 0 } else { i % 50 + 2 })
            .collect();
        let b = Batch::Text(TextBatch::new(&ids, &[0, 1, 0], seq, device));
        model.forward(&b, None).into_data().try_to_vec().unwrap()
    }

    /// A small transformer's recipe: 2 blocks of 6 heads of 4, 48 feed-forward units.
    fn spec() -> contrai_recipe::recipe::Model {
        contrai_recipe::recipe::Model {
            vocab: 64,
            seq_len: 16,
            d_model: 24,
            layers: 2,
            heads: 6,
            ffn: 48,
            ..Default::default()
        }
    }

    /// A small transformer with a third of its heads and units pruned as whole groups.
    fn pruned(device: &Device) -> Classifier {
        let model = Classifier::new(&spec(), 2, 0, 5, device).unwrap();
        let target = |p: &str| {
            let m = module_of(p);
            (m.ends_with("attn") || m.ends_with("ffn")).then_some(Target::uncapped(1.0 / 3.0))
        };
        let masks = module_masks(&model, &target, Structure::new(Some(6), true));
        apply_masks(model, &masks)
    }

    #[test]
    fn compaction_removes_the_pruned_groups_and_keeps_the_outputs() {
        let device = Device::flex();
        let dense = pruned(&device);
        let both = Structure::new(Some(6), true);
        let (small, removed) = compact(dense.clone(), both);
        assert_eq!(
            removed,
            Removed {
                heads: (4, 12),
                units: (32, 96)
            }
        );
        let t = small.transformer().unwrap();
        assert_eq!(t.blocks[0].attn.heads, 4);
        assert_eq!(t.blocks[0].attn.query.weight.dims(), [24, 16]);
        assert_eq!(t.blocks[0].attn.output.weight.dims(), [16, 24]);
        assert_eq!(t.blocks[1].ffn.up.weight.dims(), [24, 32]);
        assert_eq!(t.blocks[1].ffn.up.bias.as_ref().unwrap().dims(), [32]);
        assert_eq!(t.blocks[1].ffn.down.weight.dims(), [32, 24]);
        assert!(small.num_params() < dense.num_params());
        let (a, b) = (logits(&dense, &device), logits(&small, &device));
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
        assert!(
            removed
                .note()
                .unwrap()
                .starts_with("4 of 12 attention heads and 32 of 96")
        );
        // A model with nothing to remove is left as it is.
        let (same, none) = compact(small.clone(), both);
        assert_eq!(none.note(), None);
        assert_eq!(same.num_params(), small.num_params());
        // Only the structures pruned whole are removed.
        let (_, heads_only) = compact(dense, Structure::new(Some(6), false));
        assert_eq!(
            heads_only,
            Removed {
                heads: (4, 12),
                units: (0, 0)
            }
        );
    }

    #[test]
    fn a_compacted_file_loads_into_a_skeleton_of_its_shapes() {
        let device = Device::flex();
        let (small, _) = compact(pruned(&device), Structure::new(Some(6), true));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        crate::export::save_safetensors(&small, &path).unwrap();
        let fresh = Classifier::new(&spec(), 2, 0, 9, &device).unwrap();
        // The recipe's shape does not take the file; the file's shape does.
        assert!(crate::export::load_safetensors(fresh.clone(), &path).is_err());
        let skeleton = shaped_as_file(fresh, &path).unwrap();
        let back = crate::export::load_safetensors(skeleton, &path).unwrap();
        assert_eq!(logits(&back, &device), logits(&small, &device));
        // A file that is not safetensors is named in the error.
        std::fs::write(&path, b"not a model").unwrap();
        let err = shaped_as_file(Classifier::new(&spec(), 2, 0, 9, &device).unwrap(), &path).unwrap_err();
        assert!(err.to_string().contains("model.safetensors"), "{err}");
    }
}
