//! Knowledge distillation into a smaller student, and the short masked fine-tuning that follows a
//! one-shot pruning: both are a few hundred optimizer steps on the training rows with a loss of
//! their own, keeping the weights of the best validation evaluation.

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::{Device, Tensor, TensorData};
use contrai_recipe::recipe::{Distill, Model as ModelSpec};
use contrai_recipe::{Decay, ModelKind, Schedule};
use serde::Serialize;

use crate::batch::{Batcher, Cursor, Encoded};
use crate::dropout::Dropout;
use crate::error::Result;
use crate::evaluate::{eval_batches, evaluate};
use crate::model::{Batch, Classifier, cross_entropy};
use crate::options::Log;
use crate::prune::{Masks, apply_masks};
use crate::step::{clip_grads, grad_norm};

/// The distillation loss of a batch: `w_ce · CE(student, labels) + w_kd · T² · KL(p_t ‖ p_s)`,
/// `p = softmax(logits / T)`, the KL summed over classes and averaged over the batch (Hinton et
/// al.: T² keeps the soft term's gradients on the scale of the hard one's as T grows).
pub fn kd_loss(
    student: Tensor<2>,
    teacher: Tensor<2>,
    labels: burn::tensor::Tensor<1, burn::tensor::Int>,
    cfg: &Distill,
) -> Tensor<1> {
    let t = cfg.temperature;
    let log_q = log_softmax(student.clone().div_scalar(t), 1);
    let log_p = log_softmax(teacher.clone().div_scalar(t), 1);
    let p = softmax(teacher.div_scalar(t), 1);
    let kl = (p * (log_p - log_q)).sum_dim(1).mean();
    cross_entropy(student, labels).mul_scalar(cfg.w_ce) + kl.mul_scalar(cfg.w_kd * t * t)
}

/// The teacher's logits for `rows` of `data` (no dropout), row-major `[rows, classes]`.
pub fn teacher_logits(
    teacher: &Classifier,
    data: &Encoded,
    rows: &[usize],
    batch: usize,
    device: &Device,
) -> Vec<f32> {
    let subset = data.subset(rows);
    let mut out = Vec::new();
    for b in eval_batches(&subset, batch, device) {
        out.extend(
            teacher
                .forward(&b, None)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap_or_default(),
        );
    }
    out
}

/// The student's architecture: the teacher's vocabulary, sequence length and dropout, the
/// recipe's depth and widths. A pretrained teacher's student is Contrai's transformer on the
/// teacher's tokenizer (its vocabulary size from the checkpoint's config).
pub fn student_spec(teacher: &ModelSpec, cfg: &Distill) -> Result<ModelSpec> {
    let base = match teacher.kind {
        ModelKind::Bert => ModelSpec {
            kind: ModelKind::Transformer,
            pretrained: None,
            pooling: None,
            lora: None,
            ..crate::pretrained::sized(teacher)?
        },
        ModelKind::Transformer | ModelKind::Mlp => teacher.clone(),
    };
    Ok(ModelSpec {
        layers: cfg.layers,
        d_model: cfg.d_model,
        heads: cfg.heads,
        ffn: cfg.ffn,
        ..base
    })
}

/// A short training run's settings.
#[derive(Debug, Clone)]
pub struct Fit {
    /// Optimizer steps.
    pub steps: u64,
    /// Samples a step.
    pub batch: usize,
    /// The LR schedule over `steps`.
    pub schedule: Schedule,
    /// Global gradient-norm clip (0: none).
    pub clip: f64,
    /// Evaluate on validation every this many steps (and at the last).
    pub eval_every: u64,
    /// Dropout probability.
    pub dropout: f64,
    /// Seed of the batch order and dropout masks.
    pub seed: u64,
}

/// One row of a short run's log.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct FitRow {
    /// Step (1-based).
    pub step: u64,
    /// Training loss of the step.
    pub train_loss: f32,
    /// LR of the step.
    pub lr: f64,
    /// Validation loss, at evaluation steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f32>,
    /// Validation accuracy, at evaluation steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_accuracy: Option<f32>,
}

/// What a short run left: the best evaluation's weights (inference form) and the log.
pub struct Fitted {
    /// The model of the best validation loss.
    pub model: Classifier,
    /// Step, validation loss and accuracy of that model.
    pub best: (u64, f32, f32),
    /// Every step.
    pub rows: Vec<FitRow>,
}

/// The data a short run trains and evaluates on.
pub struct FitData<'a> {
    /// The encoded train partition.
    pub train: &'a Encoded,
    /// The rows of it to train on (the filtered data).
    pub rows: &'a [usize],
    /// The validation partition (selects the best evaluation).
    pub val: &'a Encoded,
    /// Batch of evaluation.
    pub eval_batch: usize,
}

/// The loss of a step: the model, the batch and the train rows it holds (to look up targets).
pub type StepLoss<'a> = dyn Fn(&Classifier, &Batch, &[usize], Option<&Dropout>) -> Tensor<1> + 'a;

/// Trains `model` for `fit.steps` with `loss`; `masks` are re-applied after every step so that
/// pruned weights stay zero. `on_step` sees each row (progress).
pub fn fit(
    mut model: Classifier,
    mut optim: ModuleOptimizer,
    fit: &Fit,
    data: &FitData,
    masks: &Masks,
    loss: &StepLoss,
    on_step: &mut dyn FnMut(&FitRow),
) -> Result<Fitted> {
    let device = Device::flex().autodiff();
    let plain = Device::flex();
    let mut batcher = Batcher::new(data.rows.len(), fit.batch, fit.seed, Cursor::default())?;
    model = apply_masks(model, masks);
    let (vl, va) = evaluate(&model.valid(), data.val, data.eval_batch, &plain);
    let mut best = (0, vl, va, model.valid());
    let mut rows = Vec::with_capacity(fit.steps as usize);
    for k in 0..fit.steps {
        let picked: Vec<usize> = batcher.next_batch().into_iter().map(|i| data.rows[i]).collect();
        let batch = data.train.batch(&picked, &device);
        let drop = (fit.dropout > 0.0).then(|| Dropout::new(fit.dropout, fit.seed, k, 0));
        let l = loss(&model, &batch, &picked, drop.as_ref());
        let train_loss = l.clone().into_scalar::<f32>();
        let mut grads = GradientsParams::from_grads(l.backward(), &model);
        let norm = grad_norm(&model, &grads);
        clip_grads(&model, &mut grads, norm, fit.clip);
        let lr = fit.schedule.lr(k);
        model = apply_masks(optim.step(lr, model, grads), masks);
        let mut row = FitRow {
            step: k + 1,
            train_loss,
            lr,
            val_loss: None,
            val_accuracy: None,
        };
        if (k + 1).is_multiple_of(fit.eval_every) || k + 1 == fit.steps {
            let valid = model.valid();
            let (vl, va) = evaluate(&valid, data.val, data.eval_batch, &plain);
            (row.val_loss, row.val_accuracy) = (Some(vl), Some(va));
            if vl < best.1 || best.0 == 0 && !best.1.is_finite() {
                best = (k + 1, vl, va, valid);
            }
        }
        on_step(&row);
        rows.push(row);
    }
    Ok(Fitted {
        model: best.3,
        best: (best.0, best.1, best.2),
        rows,
    })
}

/// What a student is, in words: its size and which of its evaluations was kept.
pub fn student_note(d: &Distill, kind: ModelKind, fitted: &Fitted) -> String {
    format!(
        "{}; best of {} steps at step {}",
        student_size(d, kind),
        d.steps,
        fitted.best.0
    )
}

/// The student's size in words, for a teacher of model `kind`.
pub fn student_size(d: &Distill, kind: ModelKind) -> String {
    match kind {
        ModelKind::Mlp => format!("{} hidden layer(s) of width {}", d.layers, d.ffn),
        _ => format!(
            "{} layer(s), d_model {}, {} heads, ffn {}",
            d.layers, d.d_model, d.heads, d.ffn
        ),
    }
}

/// Logs each evaluation of a short run through `log`.
pub fn log_evaluations(log: &dyn Log) -> impl FnMut(&FitRow) + '_ {
    move |r: &FitRow| {
        if let (Some(vl), Some(va)) = (r.val_loss, r.val_accuracy) {
            log.info(&format!(
                "  step {:>5}  train_loss {:.4}  val_loss {vl:.4}  val_accuracy {:.2} %",
                r.step,
                r.train_loss,
                100.0 * va
            ));
        }
    }
}

/// Distils `teacher` into a fresh student of `cfg`'s size, trained on `data.rows` with its own
/// warmup-then-cosine schedule. `optim` is the recipe's AdamW.
pub fn distill(
    teacher: &Classifier,
    teacher_spec: &ModelSpec,
    cfg: &Distill,
    data: &FitData,
    optim: ModuleOptimizer,
    (seed, clip): (u64, f64),
    on_step: &mut dyn FnMut(&FitRow),
) -> Result<Fitted> {
    let plain = Device::flex();
    let classes = teacher.classes();
    let targets = teacher_logits(teacher, data.train, data.rows, data.eval_batch, &plain);
    // Row of the train partition → its teacher logits.
    let mut at = vec![usize::MAX; data.train.len()];
    for (i, &r) in data.rows.iter().enumerate() {
        at[r] = i;
    }
    let spec = student_spec(teacher_spec, cfg)?;
    let student = Classifier::new(
        &spec,
        classes,
        data.train.width,
        seed ^ 0x57D,
        &Device::flex().autodiff(),
    )?;
    let fit_cfg = Fit {
        steps: cfg.steps,
        batch: cfg.batch.min(data.rows.len()),
        schedule: Schedule {
            peak: cfg.lr,
            floor: 0.0,
            warmup: contrai_recipe::schedule::warmup_steps(cfg.steps, cfg.warmup),
            steps: cfg.steps,
            decay: Decay::Cosine,
        },
        clip,
        eval_every: cfg.eval_every,
        dropout: spec.dropout,
        seed: seed ^ 0xD157,
    };
    let loss = |m: &Classifier, b: &Batch, rows: &[usize], d: Option<&Dropout>| {
        let t: Vec<f32> = rows
            .iter()
            .flat_map(|&r| targets[at[r] * classes..(at[r] + 1) * classes].iter().copied())
            .collect();
        let labels = b.labels();
        let t = Tensor::<2>::from_data(TensorData::new(t, [rows.len(), classes]), &labels.device());
        kd_loss(m.forward(b, d), t, labels, cfg)
    };
    fit(student, optim, &fit_cfg, data, &Masks::default(), &loss, on_step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kd_loss_equals_a_hand_computation() {
        let device = Device::flex();
        let s = [[2.0f32, -1.0, 0.5], [0.0, 0.3, -0.2]];
        let t = [[1.0f32, 0.0, -1.0], [-0.5, 1.5, 0.2]];
        let labels = [0i32, 2];
        let cfg = Distill {
            temperature: 2.0,
            w_ce: 0.3,
            w_kd: 0.7,
            ..Distill::default()
        };
        let softmax = |z: &[f32], temp: f64| -> Vec<f64> {
            let e: Vec<f64> = z.iter().map(|v| (f64::from(*v) / temp).exp()).collect();
            let sum: f64 = e.iter().sum();
            e.iter().map(|v| v / sum).collect()
        };
        let mut ce = 0.0;
        let mut kl = 0.0;
        for i in 0..2 {
            ce -= softmax(&s[i], 1.0)[labels[i] as usize].ln();
            let (p, q) = (softmax(&t[i], 2.0), softmax(&s[i], 2.0));
            kl += p.iter().zip(&q).map(|(p, q)| p * (p / q).ln()).sum::<f64>();
        }
        let want = 0.3 * ce / 2.0 + 0.7 * 4.0 * kl / 2.0;
        let flat = |m: [[f32; 3]; 2]| Tensor::<2>::from_data(TensorData::new(m.concat(), [2, 3]), &device);
        let labels = burn::tensor::Tensor::<1, burn::tensor::Int>::from_data(
            TensorData::new(labels.to_vec(), [2]),
            &device,
        );
        let got = kd_loss(flat(s), flat(t), labels, &cfg).into_scalar::<f32>();
        assert!((f64::from(got) - want).abs() < 1e-5, "{got} vs {want}");
    }

    #[test]
    fn a_student_matching_its_teacher_has_only_the_hard_loss() {
        let device = Device::flex();
        let z = Tensor::<2>::from_data(TensorData::new(vec![1.0f32, -2.0, 0.5, 0.5], [2, 2]), &device);
        let labels = burn::tensor::Tensor::<1, burn::tensor::Int>::from_data(
            TensorData::new(vec![0, 1], [2]),
            &device,
        );
        let cfg = Distill {
            w_ce: 1.0,
            w_kd: 5.0,
            ..Distill::default()
        };
        let both = kd_loss(z.clone(), z.clone(), labels.clone(), &cfg).into_scalar::<f32>();
        let hard = cross_entropy(z, labels).into_scalar::<f32>();
        assert!((both - hard).abs() < 1e-6, "{both} vs {hard}");
    }
}
