//! Each fused operation against Burn's own (decomposed) operation: the forward values and the
//! gradients of every input agree within 1e-5, on the model's shapes and on edge shapes (rows of
//! one element, rows not a multiple of any SIMD width, masked attention positions at −1e4, large
//! and tiny values).

use burn::module::Param;
use burn::nn::{LayerNorm, LayerNormConfig};
use burn::tensor::activation;
use burn::tensor::{Device, Tensor, TensorData};
use contrai_kernels::dropout::Mask;

const TOL: f32 = 1e-5;

/// Deterministic values spread over ±`scale`.
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn tensor<const D: usize>(v: Vec<f32>, shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(v, shape), device)
}

fn host<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

/// Largest |a − b| relative to max(1, |b|).
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
        .fold(0.0, f32::max)
}

fn autodiff() -> Device {
    Device::flex().autodiff()
}

/// Forward and input gradient of `f` and `reference` at `x`, with a weighted sum as the loss so
/// that every output's gradient differs.
fn compare<const D: usize>(
    x: Vec<f32>,
    shape: [usize; D],
    f: impl Fn(Tensor<D>) -> Tensor<D>,
    reference: impl Fn(Tensor<D>) -> Tensor<D>,
    what: &str,
) {
    let device = autodiff();
    let n = x.len();
    let weights = tensor(values(n, 99, 1.0), shape, &device);
    let run = |g: &dyn Fn(Tensor<D>) -> Tensor<D>| {
        let input = tensor(x.clone(), shape, &device).require_grad();
        let y = g(input.clone());
        let loss = (y.clone() * weights.clone()).sum();
        let grads = loss.backward();
        (host(y), host(input.grad(&grads).unwrap()))
    };
    let (y, dx) = run(&f);
    let (y_ref, dx_ref) = run(&reference);
    let (ey, edx) = (max_diff(&y, &y_ref), max_diff(&dx, &dx_ref));
    assert!(ey < TOL, "{what} {shape:?}: forward off by {ey}");
    assert!(edx < TOL, "{what} {shape:?}: gradient off by {edx}");
}

#[test]
fn gelu_matches_burn_forward_and_backward() {
    for (shape, scale) in [
        ([32, 128, 512], 4.0),
        ([3, 1, 1], 1.0),
        ([2, 7, 37], 12.0),
        ([1, 5, 3], 1e-3),
    ] {
        let x = values(shape.iter().product(), 1, scale);
        compare(x, shape, contrai_kernels::gelu, activation::gelu, "gelu");
    }
}

#[test]
fn attention_softmax_matches_scale_mask_softmax() {
    let device = autodiff();
    for shape in [[8, 4, 128, 128], [2, 3, 5, 1], [3, 2, 4, 37]] {
        let [b, _, _, k] = shape;
        let n: usize = shape.iter().product();
        // Padding at the end of each sample, a different length each (at least one real key).
        let bias: Vec<f32> = (0..b * k)
            .map(|i| {
                if i % k > (k * (1 + i / k)) / (b + 1) {
                    -1e4
                } else {
                    0.0
                }
            })
            .collect();
        let mask = tensor(bias, [b, 1, 1, k], &device);
        let scale = 0.125f32;
        compare(
            values(n, 3, 30.0),
            shape,
            |t| contrai_kernels::attention_softmax(t, scale, mask.clone()),
            |t| activation::softmax(t.mul_scalar(scale) + mask.clone(), 3),
            "attention softmax",
        );
    }
}

#[test]
fn softmax_matches_burn_with_masked_positions() {
    for shape in [[8, 4, 128, 128], [2, 3, 5, 1], [1, 2, 3, 37]] {
        let n: usize = shape.iter().product();
        let row = shape[3];
        // Scores as attention makes them: moderate values, the last third of keys masked.
        let mut x = values(n, 2, 6.0);
        for (i, v) in x.iter_mut().enumerate() {
            if row > 2 && i % row >= row - row / 3 {
                *v -= 1e4;
            }
        }
        compare(
            x,
            shape,
            contrai_kernels::softmax,
            |t| activation::softmax(t, 3),
            "softmax",
        );
    }
}

/// A LayerNorm whose scale and shift are not 1 and 0, so their gradients are tested in full.
fn norm(d: usize, eps: f64, device: &Device) -> LayerNorm {
    let mut ln = LayerNormConfig::new(d).with_epsilon(eps).init(device);
    ln.gamma = Param::from_tensor(tensor(values(d, 3, 1.0), [d], device).add_scalar(1.0));
    ln.beta = Some(Param::from_tensor(tensor(values(d, 4, 0.5), [d], device)));
    ln
}

/// LayerNorm's parameter gradients in f64: Σ over rows of g·x̂ and of g. They sum thousands of
/// rows, so two f32 summation orders differ by more than 1e-5; both are held to the exact value.
fn parameter_grads_f64(x: &[f32], g: &[f32], d: usize, eps: f64) -> (Vec<f32>, Vec<f32>) {
    let (mut dgamma, mut dbeta) = (vec![0f64; d], vec![0f64; d]);
    for (x, g) in x.chunks(d).zip(g.chunks(d)) {
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        for i in 0..d {
            dgamma[i] += g[i] as f64 * (x[i] as f64 - mean) * rstd;
            dbeta[i] += g[i] as f64;
        }
    }
    let f = |v: Vec<f64>| v.into_iter().map(|v| v as f32).collect();
    (f(dgamma), f(dbeta))
}

#[test]
fn layer_norm_matches_burn_with_parameter_gradients() {
    let device = autodiff();
    for (shape, eps, scale) in [
        ([32, 128, 128], 1e-5, 3.0),
        ([4, 16, 384], 1e-12, 1.0),
        ([2, 3, 1], 1e-5, 1.0),
        ([3, 5, 37], 1e-5, 200.0),
    ] {
        let d = shape[2];
        let x = values(shape.iter().product(), 5, scale);
        let w = values(x.len(), 98, 1.0);
        let weights = tensor(w.clone(), shape, &device);
        let run = |fused: bool| {
            let ln = norm(d, eps, &device);
            let input = tensor(x.clone(), shape, &device).require_grad();
            let y = if fused {
                contrai_kernels::layer_norm(&ln, input.clone(), eps)
            } else {
                ln.forward(input.clone())
            };
            let grads = (y.clone() * weights.clone()).sum().backward();
            let g = |t: Tensor<1>| host(t.grad(&grads).unwrap());
            (
                host(y),
                host(input.grad(&grads).unwrap()),
                g(ln.gamma.val()),
                g(ln.beta.as_ref().unwrap().val()),
            )
        };
        let (fused, burn) = (run(true), run(false));
        let (dgamma, dbeta) = parameter_grads_f64(&x, &w, d, eps);
        for (what, got, want) in [
            ("y", &fused.0, &burn.0),
            ("dx", &fused.1, &burn.1),
            ("dgamma", &fused.2, &dgamma),
            ("dbeta", &fused.3, &dbeta),
        ] {
            let e = max_diff(got, want);
            assert!(e < TOL, "layer norm {shape:?} eps {eps}: {what} off by {e}");
        }
    }
}

#[test]
fn fused_ops_run_without_autodiff_and_repeat_bit_for_bit() {
    let device = Device::flex();
    let x = tensor(values(4 * 64 * 96, 7, 5.0), [4, 64, 96], &device);
    let ln = LayerNormConfig::new(96).init(&device);
    let run = || {
        let h = contrai_kernels::layer_norm(&ln, x.clone(), 1e-5);
        host(contrai_kernels::softmax(contrai_kernels::gelu(h)))
    };
    let first = run();
    let reference = host(activation::softmax(activation::gelu(ln.forward(x.clone())), 2));
    assert!(max_diff(&first, &reference) < TOL);
    assert_eq!(first, run());
}

#[test]
fn a_nan_stays_visible() {
    let device = Device::flex();
    let mut v = values(2 * 40, 8, 3.0);
    v[45] = f32::NAN;
    let x = tensor(v, [1, 1, 2, 40], &device);
    let bias = tensor(vec![0.0; 40], [1, 1, 1, 40], &device);
    let y = host(contrai_kernels::attention_softmax(x.clone(), 1.0, bias));
    assert!(
        y[..40].iter().all(|v| v.is_finite()),
        "the clean row stays finite"
    );
    assert!(
        y[40..].iter().all(|v| v.is_nan()),
        "the row holding a NaN is NaN throughout"
    );
    assert!(host(contrai_kernels::gelu(x))[45].is_nan());
}

/// A linear layer with deterministic weights and bias (bias left out when `bias` is false).
fn dense(d_in: usize, d_out: usize, bias: bool, device: &Device) -> burn::nn::Linear {
    let mut l = burn::nn::LinearConfig::new(d_in, d_out)
        .with_bias(bias)
        .init(device);
    l.weight = Param::from_tensor(tensor(values(d_in * d_out, 11, 0.5), [d_in, d_out], device));
    if bias {
        l.bias = Some(Param::from_tensor(tensor(
            values(d_out, 12, 1.0),
            [d_out],
            device,
        )));
    }
    l
}

/// A linear layer's parameter gradients in f64: `xᵀ · g` and the column sums of `g`.
fn linear_parameter_grads_f64(x: &[f32], g: &[f32], d_in: usize, d_out: usize) -> (Vec<f32>, Vec<f32>) {
    let (mut dw, mut db) = (vec![0f64; d_in * d_out], vec![0f64; d_out]);
    for (x, g) in x.chunks(d_in).zip(g.chunks(d_out)) {
        for (i, &xi) in x.iter().enumerate() {
            for (j, &gj) in g.iter().enumerate() {
                dw[i * d_out + j] += xi as f64 * gj as f64;
            }
        }
        db.iter_mut().zip(g).for_each(|(d, &g)| *d += g as f64);
    }
    let f = |v: Vec<f64>| v.into_iter().map(|v| v as f32).collect();
    (f(dw), f(db))
}

#[test]
fn linear_matches_burn_with_parameter_gradients() {
    let device = autodiff();
    for (shape, d_out, bias, frozen) in [
        ([8, 128, 128], 512, true, false),
        ([2, 16, 384], 1536, true, false),
        ([2, 3, 5], 1, true, false),
        ([1, 1, 37], 3, false, false),
        ([3, 4, 20], 9, true, true),
    ] {
        let d_in = shape[2];
        let x = values(shape.iter().product(), 13, 2.0);
        let weights = tensor(
            values(x.len() / d_in * d_out, 97, 1.0),
            [shape[0], shape[1], d_out],
            &device,
        );
        let run = |fused: bool| {
            let mut l = dense(d_in, d_out, bias, &device);
            if frozen {
                l.weight = l.weight.set_require_grad(false);
            }
            let input = tensor(x.clone(), shape, &device).require_grad();
            let y = if fused {
                contrai_kernels::linear(&l, input.clone())
            } else {
                l.forward(input.clone())
            };
            let grads = (y.clone() * weights.clone()).sum().backward();
            let dw = l.weight.val().grad(&grads).map(host);
            let db = l.bias.as_ref().and_then(|b| b.val().grad(&grads)).map(host);
            (host(y), host(input.grad(&grads).unwrap()), dw, db)
        };
        let (fused, burn) = (run(true), run(false));
        let what = format!("linear {shape:?} → {d_out}");
        assert!(max_diff(&fused.0, &burn.0) < TOL, "{what}: forward");
        assert!(max_diff(&fused.1, &burn.1) < TOL, "{what}: dx");
        assert_eq!(
            fused.2.is_some(),
            !frozen,
            "{what}: a frozen weight gets no gradient"
        );
        assert_eq!(
            fused.3.is_some(),
            bias,
            "{what}: a bias gradient exactly when there is a bias"
        );
        // The parameter gradients are sums over every row: f32 loses about 1e-5 of such a sum
        // per 256 rows whatever the order (Burn's own: 2.2e-5 at 1,024 rows), so both are held
        // to the f64 sums within 1e-5 per 256 rows summed.
        let rows = x.len() / d_in;
        let tol = TOL * rows.div_ceil(256) as f32;
        let (dw, db) = linear_parameter_grads_f64(&x, &host(weights.clone()), d_in, d_out);
        for (name, got, want) in [
            ("dw", &fused.2, &dw),
            ("dbias", &fused.3, &db),
            ("Burn's dw", &burn.2, &dw),
            ("Burn's dbias", &burn.3, &db),
        ] {
            if let Some(got) = got {
                let e = max_diff(got, want);
                assert!(e < tol, "{what}: {name} off by {e} (bound {tol})");
            }
        }
    }
}

/// Attention from Burn's own operations: split the heads, `softmax(q kᵀ · scale + bias) ⊙ drop`,
/// times v, merge the heads.
fn attention_reference(
    [q, k, v]: [Tensor<3>; 3],
    bias: Tensor<4>,
    heads: usize,
    drop: Option<Tensor<4>>,
) -> Tensor<3> {
    let [b, s, w] = q.dims();
    let split = |t: Tensor<3>| t.reshape([b, s, heads, w / heads]).swap_dims(1, 2);
    let scale = 1.0 / ((w / heads) as f32).sqrt();
    let scores = split(q).matmul(split(k).swap_dims(2, 3)).mul_scalar(scale) + bias;
    let mut p = activation::softmax(scores, 3);
    if let Some(d) = drop {
        p = p * d;
    }
    p.matmul(split(v)).swap_dims(1, 2).reshape([b, s, w])
}

#[test]
fn attention_matches_burn_with_padding_and_dropout() {
    let device = autodiff();
    for (b, s, heads, dim, dropout) in [
        (4, 128, 4, 32, false),
        (2, 64, 12, 32, true),
        (2, 5, 3, 1, true),
        (3, 7, 2, 5, false),
        (1, 1, 1, 4, true),
    ] {
        let w = heads * dim;
        let n = b * s * w;
        // Padding at the end of each sample, a different length each (at least one real key).
        let bias: Vec<f32> = (0..b * s)
            .map(|i| {
                if i % s > (s * (1 + i / s)) / (b + 1) {
                    -1e4
                } else {
                    0.0
                }
            })
            .collect();
        let bias = tensor(bias, [b, 1, 1, s], &device);
        // The kernel draws each head's block of the mask itself (heads of s² elements start
        // inside a draw and a stream when s is odd); the reference multiplies the whole mask.
        let drop = dropout.then(|| Mask::new(0.1, 21, 5).unwrap());
        let inputs = [31, 32, 33].map(|seed| values(n, seed, 3.0));
        let weights = tensor(values(n, 96, 1.0), [b, s, w], &device);
        let run = |fused: bool| {
            let [q, k, v] = inputs
                .clone()
                .map(|x| tensor(x, [b, s, w], &device).require_grad());
            let y = if fused {
                contrai_kernels::attention(q.clone(), k.clone(), v.clone(), bias.clone(), heads, drop)
            } else {
                let d = drop.map(|d| tensor(d.values(b * heads * s * s), [b, heads, s, s], &device));
                attention_reference([q.clone(), k.clone(), v.clone()], bias.clone(), heads, d)
            };
            let grads = (y.clone() * weights.clone()).sum().backward();
            let g = |t: &Tensor<3>| host(t.grad(&grads).unwrap());
            [host(y.clone()), g(&q), g(&k), g(&v)]
        };
        let (fused, burn) = (run(true), run(false));
        for (what, a, r) in ["context", "dq", "dk", "dv"]
            .into_iter()
            .zip(&fused)
            .zip(&burn)
            .map(|((w, a), r)| (w, a, r))
        {
            let e = max_diff(a, r);
            assert!(
                e < TOL,
                "attention b{b} s{s} h{heads} d{dim} drop {dropout}: {what} off by {e}"
            );
        }
    }
}

#[test]
fn linear_and_attention_evaluate_without_autodiff_bit_for_bit() {
    let device = Device::flex();
    let (b, s, heads, dim) = (3, 40, 4, 8);
    let x = tensor(values(b * s * 32, 41, 2.0), [b, s, 32], &device);
    let bias = tensor(vec![0.0; b * s], [b, 1, 1, s], &device);
    let [lq, lk, lv] = [32, 32, 32].map(|d| dense(d, heads * dim, true, &device));
    let run = |fused: bool| {
        let [q, k, v] = [&lq, &lk, &lv].map(|l| {
            if fused {
                contrai_kernels::linear(l, x.clone())
            } else {
                l.forward(x.clone())
            }
        });
        if fused {
            host(contrai_kernels::attention(q, k, v, bias.clone(), heads, None))
        } else {
            host(attention_reference([q, k, v], bias.clone(), heads, None))
        }
    };
    let first = run(true);
    assert!(max_diff(&first, &run(false)) < TOL);
    assert_eq!(first, run(true));
}
