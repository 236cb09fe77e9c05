//! LoRA on a pretrained encoder (`[model.lora]`): adapters drawn from the run's seed on the
//! recipe's target layers, the encoder's own weights frozen and the head left to train; and the
//! merge that folds the adapters back into dense weights when main ends.
//!
//! Why merge then: contraction prunes weights with masks, and a mask on a frozen base would be
//! refilled by its adapter's `scale · a·b`; the merged model is pruned and fine-tuned whole.

use burn::module::{LoraAdapter, Module, ModuleVisitor, Param, Reparameterizer};
use burn::tensor::{Tensor, TensorData};
use contrai_recipe::recipe::Lora;

use crate::error::{Result, TrainError};
use crate::model::{Classifier, Init};

/// `model` with adapters on the encoder's target layers; only the adapters and the head train.
/// Adapter `a` is drawn uniform in ±1/√d_in from `seed` (as PEFT's Kaiming init), `b` is zero,
/// so the model's outputs are unchanged until the first step.
pub fn attach(model: Classifier, spec: &Lora, seed: u64) -> Result<Classifier> {
    let Classifier::Bert(mut m) = model else {
        return Err(TrainError::Unsupported(
            "model.lora adapts a pretrained encoder (model.kind = \"bert\")".into(),
        ));
    };
    let mut adapters = Adapters {
        spec,
        init: Init::new(seed ^ 0x10_4A),
        hits: vec![0; spec.targets.len()],
        layers: Vec::new(),
    };
    m.bert = m.bert.apply_reparameterization(&mut adapters);
    if let Some(i) = adapters.hits.iter().position(|&n| n == 0) {
        let mut layers = adapters.layers;
        layers.sort();
        layers.dedup();
        return Err(TrainError::Unsupported(format!(
            "model.lora.targets: {:?} matches no linear layer of the checkpoint; its layers end in {}",
            spec.targets[i],
            layers.join(", ")
        )));
    }
    Ok(Classifier::Bert(m))
}

/// `model` with its adapters folded into the weights (`base + scale · a·b`) and every weight
/// trainable again: a full fine-tune's model. A model without adapters is returned as it is.
pub fn merge(model: Classifier) -> Classifier {
    match adapters(&model) {
        0 => model,
        _ => model.materialize().set_require_grad(true),
    }
}

/// The number of LoRA adapters in `model`.
pub fn adapters(model: &Classifier) -> usize {
    count(model).adapters
}

/// `(trainable, all)` parameter counts of `model`, adapters included.
pub fn trainable(model: &Classifier) -> (usize, usize) {
    let c = count(model);
    (c.trainable, c.all)
}

fn count(model: &Classifier) -> Count {
    let mut c = Count::default();
    model.visit(&mut c);
    c
}

#[derive(Default)]
struct Count {
    adapters: usize,
    trainable: usize,
    all: usize,
}

impl ModuleVisitor for Count {
    fn enter_module(&mut self, _name: &str, container_type: &str) {
        self.adapters += usize::from(container_type == "Reparameterization");
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let n = param.lazy_shape().num_elements();
        self.all += n;
        if param.is_require_grad() {
            self.trainable += n;
        }
    }
}

/// The reparameterizer: every encoder parameter frozen, seeded adapters on the targets.
struct Adapters<'a> {
    spec: &'a Lora,
    init: Init,
    /// Layers each target matched.
    hits: Vec<usize>,
    /// The last path component of every linear layer seen (for the error on a target that
    /// matches none).
    layers: Vec<String>,
}

impl Adapters<'_> {
    /// Which target the module at `module` (its path) matches: the whole path or its end.
    fn target(&self, module: &str) -> Option<usize> {
        self.spec.targets.iter().position(|t| {
            module == t
                || module
                    .strip_suffix(t.as_str())
                    .is_some_and(|head| head.ends_with('.'))
        })
    }
}

impl Reparameterizer for &mut Adapters<'_> {
    type Reparam = LoraAdapter;

    fn reparameterize<const D: usize>(
        &mut self,
        path: &str,
        param: Param<Tensor<D>>,
    ) -> (Param<Tensor<D>>, Option<LoraAdapter>) {
        let base = param.set_require_grad(false);
        let Some(module) = path.strip_suffix(".weight").filter(|_| D == 2) else {
            return (base, None);
        };
        if let Some(last) = module.rsplit('.').next() {
            self.layers.push(last.to_string());
        }
        let Some(t) = self.target(module) else {
            return (base, None);
        };
        self.hits[t] += 1;
        let dims = base.lazy_shape().dims::<2>();
        let (d_in, d_out, rank) = (dims[0], dims[1], self.spec.rank);
        let device = base.lazy_device();
        let a = self.init.uniform(d_in * rank, 1.0 / (d_in as f64).sqrt());
        let adapter = LoraAdapter {
            a: Param::from_data(TensorData::new(a, [d_in, rank]), &device),
            b: Param::from_data(TensorData::new(vec![0f32; rank * d_out], [rank, d_out]), &device),
            scale: self.spec.alpha / rank as f64,
        };
        (base, Some(adapter))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Batch, TextBatch};
    use crate::step::step_grads;
    use burn::tensor::Device;

    fn bert(device: &Device) -> Classifier {
        crate::pretrained::fixture(device)
    }

    fn batch(device: &Device) -> Batch {
        let ids: Vec<i32> = (0..4 * 8)
            .map(|i| if i % 8 > 5 { 0 } else { i % 50 + 5 })
            .collect();
        Batch::Text(TextBatch::new(&ids, &[0, 1, 1, 0], 8, device))
    }

    fn logits(m: &Classifier, device: &Device) -> Vec<f32> {
        m.forward(&batch(device), None).into_data().try_to_vec().unwrap()
    }

    fn values(t: Tensor<2>) -> Vec<f32> {
        t.into_data().try_to_vec().unwrap()
    }

    fn query(m: &Classifier) -> &Param<Tensor<2>> {
        let Classifier::Bert(b) = m else { unreachable!() };
        &b.bert.encoder.layer[0].attention.self_attn.query.weight
    }

    #[test]
    fn adapters_start_silent_train_alone_with_the_head_and_merge_to_the_same_outputs() {
        let device = Device::flex().autodiff();
        let dense = bert(&device);
        let spec = Lora {
            rank: 2,
            alpha: 4.0,
            targets: vec!["query".into(), "value".into()],
        };
        let m = attach(dense.clone(), &spec, 11).unwrap();
        let layers = 2;
        assert_eq!(adapters(&m), 2 * layers);
        assert_eq!(logits(&m, &device), logits(&dense, &device), "b = 0: unchanged");
        // Trainable: the adapters (32·2 + 2·32 each) and the head (32·2 + 2); nothing else.
        let (train, all) = trainable(&m);
        assert_eq!(train, 2 * layers * (32 * 2 + 2 * 32) + 32 * 2 + 2);
        assert_eq!(all, trainable(&dense).1 + 2 * layers * 128);
        // The same seed draws the same adapters; another seed others.
        let a = |m: &Classifier| values(query(m).adapter().unwrap().a.val());
        assert_eq!(a(&m), a(&attach(dense.clone(), &spec, 11).unwrap()));
        assert_ne!(a(&m), a(&attach(dense.clone(), &spec, 12).unwrap()));
        // One optimizer step moves the adapters and the head only.
        let (grads, _) = step_grads(&m, &[batch(&device)], &[None], false, false);
        let mut optim = crate::step::optimizer(&contrai_recipe::Recipe::default());
        let stepped = optim.step(1e-2, m.clone(), grads);
        assert_eq!(values(query(&stepped).base()), values(query(&m).base()));
        assert_ne!(
            values(query(&stepped).adapter().unwrap().b.val()),
            values(query(&m).adapter().unwrap().b.val())
        );
        let Classifier::Bert(s) = &stepped else {
            unreachable!()
        };
        let Classifier::Bert(d) = &dense else {
            unreachable!()
        };
        let key = |b: &contrai_bert::BertClassifier| {
            values(b.bert.encoder.layer[0].attention.self_attn.key.weight.val())
        };
        assert_eq!(key(s), key(d), "not a target: frozen");
        assert_ne!(
            values(s.classifier.weight.val()),
            values(d.classifier.weight.val())
        );
        // Merged: the same outputs, no adapters, every weight trainable again.
        let merged = merge(stepped.clone());
        assert_eq!(adapters(&merged), 0);
        let (l, r) = (logits(&merged, &device), logits(&stepped, &device));
        assert!(
            l.iter().zip(&r).all(|(a, b)| (a - b).abs() < 1e-5),
            "{l:?} vs {r:?}"
        );
        assert_eq!(trainable(&merged).0, trainable(&merged).1);
    }

    #[test]
    fn a_target_that_matches_no_layer_is_refused_with_the_layers_there_are() {
        let spec = Lora {
            targets: vec!["query".into(), "qkv".into()],
            ..Lora::default()
        };
        let err = attach(bert(&Device::flex()), &spec, 1).unwrap_err().to_string();
        assert!(
            err.contains("\"qkv\"") && err.contains("query") && err.contains("dense"),
            "{err}"
        );
        let mlp_spec = contrai_recipe::recipe::Model {
            kind: contrai_recipe::ModelKind::Mlp,
            ..Default::default()
        };
        let mlp = Classifier::new(&mlp_spec, 2, 4, 1, &Device::flex()).unwrap();
        assert!(attach(mlp, &Lora::default(), 1).is_err());
    }
}
