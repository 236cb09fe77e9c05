//! GELU, softmax and LayerNorm as single Burn operations with their own backward passes.
//!
//! Under autodiff Burn builds softmax and LayerNorm from five to ten small operations, each
//! allocating a tensor and recording a backward step, and computes GELU through a per-element
//! `erff` call. Here each is one operation: the forward runs one kernel (Burn flex's own fused
//! softmax and LayerNorm, this crate's GELU), the backward one kernel of [`crate::math`].
//! Burn's backend-extension mechanism routes a call to the flex implementation or, on an
//! autodiff device, to the implementation that records the backward step.

use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::backend::flex::{FlexTensor, Layout};
use burn::backend::ops::{ActivationOps, FloatTensorOps, ModuleOps};
use burn::backend::tensor::FloatTensor;
use burn::backend::{
    Autodiff, AutodiffBackend, Backend, Bytes, DType, Flex, Shape, TensorMetadata, backend_extension,
};

use crate::denormals::tally;
use crate::dropout::Mask;
use crate::int8::{self, Int8Weights};
use crate::math;
use crate::matmul::{self, Heads};

/// A linear layer in int8: its packed weights and its bias.
pub type Int8Layer = (std::sync::Arc<Int8Weights>, Option<std::sync::Arc<[f32]>>);
/// Linear layers in int8 that share an input.
pub type Int8Layers = std::sync::Arc<[Int8Layer]>;
/// A LayerNorm's γ, β and ε, applied to an int8 block's input rows ([`int8::Norm`]).
pub type NormValues = (std::sync::Arc<[f32]>, std::sync::Arc<[f32]>, f32);

/// The fused operations, on any backend that implements them (flex, and autodiff over flex).
#[backend_extension(Flex, Autodiff)]
pub trait Fused: Backend {
    /// GELU, exact (erf) form.
    fn fused_gelu(x: FloatTensor<Self>) -> FloatTensor<Self>;
    /// Softmax over the last dimension of `x · scale + mask`, the mask a constant whose rows each
    /// cover a consecutive block of `x`'s rows (attention's `[batch, 1, 1, keys]` key mask).
    fn fused_softmax(x: FloatTensor<Self>, mask: FloatTensor<Self>, scale: f32) -> FloatTensor<Self>;
    /// `x · W + bias` over the last dimension for each layer (weights in int8, bias), `x`
    /// (normalised by `norm` when given) quantized once for all ([`crate::int8::linears`]); not
    /// differentiated (an int8 model only evaluates).
    fn fused_int8_linears(
        x: FloatTensor<Self>,
        norm: Option<NormValues>,
        layers: Int8Layers,
    ) -> Vec<FloatTensor<Self>>;
    /// `gelu(x · W₁ + b₁) · W₂ + b₂` over the last dimension in int8 — with `norm`, the residual
    /// block `x + ffn(norm(x))` — block of rows by block of rows ([`crate::int8::feed_forward`]);
    /// not differentiated.
    fn fused_int8_feed_forward(
        x: FloatTensor<Self>,
        norm: Option<NormValues>,
        up: Int8Layer,
        down: Int8Layer,
    ) -> FloatTensor<Self>;
    /// `x · w + bias` over the last dimension of f32 tensors ([`crate::matmul::linear`]).
    fn fused_linear(x: FloatTensor<Self>, w: FloatTensor<Self>, bias: FloatTensor<Self>)
    -> FloatTensor<Self>;
    /// Multi-head attention over `[batch, seq, heads · dim]` f32 projections
    /// ([`crate::matmul::attention`]); `key_bias` is `[batch, 1, 1, seq]` (data, not
    /// differentiated), `drop` the dropout mask of the probabilities (`[batch, heads, seq, seq]`).
    #[allow(clippy::too_many_arguments)]
    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        key_bias: FloatTensor<Self>,
        drop: Option<Mask>,
        heads: usize,
        scale: f32,
    ) -> FloatTensor<Self>;
    /// LayerNorm over the last dimension: `(x − mean) / √(var + eps) · gamma + beta`.
    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
    ) -> FloatTensor<Self>;
}

/// The backward kernels the autodiff implementation calls on the inner backend.
pub trait FusedBackward: Backend {
    /// ∂L/∂x of GELU at `x`, given ∂L/∂y.
    fn fused_gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self>;
    /// ∂L/∂x of [`Fused::fused_softmax`] from its output `y` and scale, given ∂L/∂y.
    fn fused_softmax_backward(y: FloatTensor<Self>, grad: FloatTensor<Self>, scale: f32)
    -> FloatTensor<Self>;
    /// ∂L/∂x, ∂L/∂w, ∂L/∂bias of [`Fused::fused_linear`] at `x` given ∂L/∂y; only those `need`
    /// asks for are computed.
    fn fused_linear_backward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        need: [bool; 3],
    ) -> [Option<FloatTensor<Self>>; 3];
    /// [`Fused::fused_attention`]'s context and its probabilities before dropout (kept for the
    /// backward pass).
    fn fused_attention_keep(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        key_bias: FloatTensor<Self>,
        drop: Option<Mask>,
        heads: usize,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
    /// ∂L/∂q, ∂L/∂k, ∂L/∂v of [`Fused::fused_attention`], given ∂L/∂context.
    #[allow(clippy::too_many_arguments)]
    fn fused_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        probabilities: FloatTensor<Self>,
        drop: Option<Mask>,
        grad: FloatTensor<Self>,
        heads: usize,
        scale: f32,
    ) -> [FloatTensor<Self>; 3];
    /// ∂L/∂x, ∂L/∂gamma, ∂L/∂beta of a LayerNorm at `x`, given ∂L/∂y.
    fn fused_layer_norm_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        eps: f64,
    ) -> [FloatTensor<Self>; 3];
}

/// The int8 kernels' view of a pre-norm's γ, β and ε.
fn int8_norm(norm: &Option<NormValues>) -> Option<int8::Norm<'_>> {
    norm.as_ref().map(|(gamma, beta, eps)| int8::Norm {
        gamma,
        beta,
        eps: *eps,
    })
}

/// A contiguous f32 copy (or view) of a flex tensor.
fn contiguous(t: &FlexTensor) -> FlexTensor {
    t.to_contiguous()
}

fn values(t: &FlexTensor) -> &[f32] {
    t.as_slice::<f32>()
        .expect("contiguous f32 tensor (checked by the caller)")
}

/// `shape` with its last dimension set to `n` (a linear layer's output).
fn with_last(mut shape: Shape, n: usize) -> Shape {
    let last = shape.num_dims() - 1;
    shape[last] = n;
    shape
}

fn flex(values: Vec<f32>, shape: Shape) -> FlexTensor {
    FlexTensor::new(Bytes::from_elems(values), Layout::contiguous(shape), DType::F32)
}

impl Fused for Flex {
    fn fused_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        if x.dtype() != DType::F32 {
            return Flex::gelu(x);
        }
        let x = contiguous(&x);
        let y = math::gelu_all(values(&x));
        tally("gelu", &[values(&x)], &[&y]);
        flex(y, x.shape())
    }

    fn fused_softmax(x: FloatTensor<Self>, mask: FloatTensor<Self>, scale: f32) -> FloatTensor<Self> {
        let (x, mask) = (contiguous(&x), contiguous(&mask));
        let shape = x.shape();
        let row = shape[shape.num_dims() - 1];
        let y = math::softmax(values(&x), values(&mask), scale, row);
        tally("softmax", &[values(&x)], &[&y]);
        flex(y, shape)
    }

    fn fused_int8_linears(
        x: FloatTensor<Self>,
        norm: Option<NormValues>,
        layers: Int8Layers,
    ) -> Vec<FloatTensor<Self>> {
        let x = contiguous(&x);
        let borrowed: Vec<_> = layers.iter().map(|(w, b)| (w.as_ref(), b.as_deref())).collect();
        let outputs = int8::linears(values(&x), int8_norm(&norm), &borrowed);
        outputs
            .into_iter()
            .zip(layers.iter())
            .map(|(y, (w, _))| flex(y, with_last(x.shape(), w.outputs())))
            .collect()
    }

    fn fused_int8_feed_forward(
        x: FloatTensor<Self>,
        norm: Option<NormValues>,
        up: Int8Layer,
        down: Int8Layer,
    ) -> FloatTensor<Self> {
        let x = contiguous(&x);
        let shape = with_last(x.shape(), down.0.outputs());
        let (up, down) = ((&*up.0, up.1.as_deref()), (&*down.0, down.1.as_deref()));
        let y = int8::feed_forward(values(&x), int8_norm(&norm), up, down);
        flex(y, shape)
    }

    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let (x, w, bias) = (contiguous(&x), contiguous(&w), contiguous(&bias));
        let [d_in, d_out] = [w.shape()[0], w.shape()[1]];
        let shape = with_last(x.shape(), d_out);
        let y = matmul::linear(values(&x), values(&w), values(&bias), d_in, d_out);
        tally("linear", &[values(&x), values(&w)], &[&y]);
        flex(y, shape)
    }

    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        key_bias: FloatTensor<Self>,
        drop: Option<Mask>,
        heads: usize,
        scale: f32,
    ) -> FloatTensor<Self> {
        attend(q, k, v, key_bias, drop, heads, scale, false).0
    }

    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
    ) -> FloatTensor<Self> {
        if x.dtype() != DType::F32 {
            return Flex::layer_norm(x, gamma, Some(beta), eps);
        }
        let (x, gamma, beta) = (contiguous(&x), contiguous(&gamma), contiguous(&beta));
        let y = math::layer_norm(values(&x), values(&gamma), values(&beta), eps as f32);
        tally("layer_norm", &[values(&x)], &[&y]);
        flex(y, x.shape())
    }
}

/// The sizes of an attention call from its `[batch, seq, heads · dim]` query tensor.
fn heads_of(q: &FlexTensor, heads: usize) -> Heads {
    let shape = q.shape();
    Heads {
        batch: shape[0],
        seq: shape[1],
        heads,
        dim: shape[2] / heads.max(1),
    }
}

/// Attention's context and (when `keep`) probabilities as flex tensors.
#[allow(clippy::too_many_arguments)]
fn attend(
    q: FlexTensor,
    k: FlexTensor,
    v: FlexTensor,
    key_bias: FlexTensor,
    drop: Option<Mask>,
    heads: usize,
    scale: f32,
    keep: bool,
) -> (FlexTensor, FlexTensor) {
    let (q, k, v, key_bias) = (
        contiguous(&q),
        contiguous(&k),
        contiguous(&v),
        contiguous(&key_bias),
    );
    let shape = heads_of(&q, heads);
    let out = matmul::attention(
        shape,
        values(&q),
        values(&k),
        values(&v),
        values(&key_bias),
        drop,
        scale,
        keep,
    );
    let inputs = [values(&q), values(&k), values(&v)];
    tally("attention", &inputs, &[&out.context]);
    tally("attention.probabilities", &[], &[&out.probabilities]);
    let probabilities = Shape::new([
        shape.batch,
        shape.heads,
        shape.seq,
        if keep { shape.seq } else { 0 },
    ]);
    (
        flex(out.context, q.shape()),
        flex(out.probabilities, probabilities),
    )
}

impl FusedBackward for Flex {
    fn fused_gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        let (x, g) = (contiguous(&x), contiguous(&grad));
        let dx = math::gelu_backward(values(&x), values(&g));
        tally("gelu.backward", &[values(&g)], &[&dx]);
        flex(dx, x.shape())
    }

    fn fused_softmax_backward(
        y: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        scale: f32,
    ) -> FloatTensor<Self> {
        let (y, g) = (contiguous(&y), contiguous(&grad));
        let shape = y.shape();
        let row = shape[shape.num_dims() - 1];
        let dx = math::softmax_backward(values(&y), values(&g), row, scale);
        tally("softmax.backward", &[values(&g)], &[&dx]);
        flex(dx, shape)
    }

    fn fused_linear_backward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        need: [bool; 3],
    ) -> [Option<FloatTensor<Self>>; 3] {
        let (x, w, g) = (contiguous(&x), contiguous(&w), contiguous(&grad));
        let [d_in, d_out] = [w.shape()[0], w.shape()[1]];
        let (xs, ws, gs) = (values(&x), values(&w), values(&g));
        let dx = need[0].then(|| matmul::linear_backward_x(gs, ws, d_in, d_out));
        let dw = need[1].then(|| matmul::linear_backward_w(xs, gs, d_in, d_out));
        let outputs: Vec<&[f32]> = dx.iter().chain(&dw).map(|d| d.as_slice()).collect();
        tally("linear.backward", &[gs], &outputs);
        [
            dx.map(|d| flex(d, x.shape())),
            dw.map(|d| flex(d, w.shape())),
            need[2].then(|| flex(matmul::linear_backward_bias(gs, d_out), Shape::new([d_out]))),
        ]
    }

    fn fused_attention_keep(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        key_bias: FloatTensor<Self>,
        drop: Option<Mask>,
        heads: usize,
        scale: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        attend(q, k, v, key_bias, drop, heads, scale, true)
    }

    fn fused_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        probabilities: FloatTensor<Self>,
        drop: Option<Mask>,
        grad: FloatTensor<Self>,
        heads: usize,
        scale: f32,
    ) -> [FloatTensor<Self>; 3] {
        let [q, k, v, p, g] = [q, k, v, probabilities, grad].map(|t| contiguous(&t));
        let shape = heads_of(&q, heads);
        let grads = matmul::attention_backward(
            shape,
            values(&q),
            values(&k),
            values(&v),
            values(&p),
            drop,
            values(&g),
            scale,
        );
        tally(
            "attention.backward",
            &[values(&g)],
            &grads.each_ref().map(|d| d.as_slice()),
        );
        grads.map(|d| flex(d, q.shape()))
    }

    fn fused_layer_norm_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        eps: f64,
    ) -> [FloatTensor<Self>; 3] {
        let (x, g, gamma) = (contiguous(&x), contiguous(&grad), contiguous(&gamma));
        let grads = math::layer_norm_backward(values(&x), values(&g), values(&gamma), eps as f32);
        tally("layer_norm.backward", &[values(&g)], &[&grads.x]);
        let features = gamma.shape();
        [
            flex(grads.x, x.shape()),
            flex(grads.gamma, features.clone()),
            flex(grads.beta, features),
        ]
    }
}

impl<B: Fused + FusedBackward, C: CheckpointStrategy> Fused for Autodiff<B, C> {
    fn fused_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Gelu;

        impl<B: FusedBackward> Backward<B, 1> for Gelu {
            type State = FloatTensor<B>;

            fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                let x = ops.state;
                unary::<B, _>(ops.parents, ops.node, grads, |g| B::fused_gelu_backward(x, g));
            }
        }

        if x.primitive().dtype() != DType::F32 {
            return Autodiff::<B, C>::gelu(x);
        }
        match Gelu.prepare::<C>([x.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let input = x.into_primitive();
                let out = B::fused_gelu(input.clone());
                prep.finish(input, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::fused_gelu(x.into_primitive())),
        }
    }

    fn fused_softmax(x: FloatTensor<Self>, mask: FloatTensor<Self>, scale: f32) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Softmax;

        impl<B: FusedBackward> Backward<B, 1> for Softmax {
            type State = (FloatTensor<B>, f32);

            fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                let (y, scale) = ops.state;
                unary::<B, _>(ops.parents, ops.node, grads, |g| {
                    B::fused_softmax_backward(y, g, scale)
                });
            }
        }

        if x.primitive().dtype() != DType::F32 {
            let last = x.primitive().shape().num_dims() - 1;
            let scaled = Autodiff::<B, C>::float_mul_scalar(x, scale.into());
            return Autodiff::<B, C>::softmax(Autodiff::<B, C>::float_add(scaled, mask), last);
        }
        // The mask is data, not a parameter: it is never differentiated.
        let mask = mask.into_primitive();
        match Softmax.prepare::<C>([x.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let out = B::fused_softmax(x.into_primitive(), mask, scale);
                prep.finish((out.clone(), scale), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::fused_softmax(x.into_primitive(), mask, scale)),
        }
    }

    fn fused_int8_linears(
        x: FloatTensor<Self>,
        norm: Option<NormValues>,
        layers: Int8Layers,
    ) -> Vec<FloatTensor<Self>> {
        // Evaluation only: the results are constants of the graph.
        B::fused_int8_linears(x.into_primitive(), norm, layers)
            .into_iter()
            .map(Autodiff::<B, C>::from_inner)
            .collect()
    }

    fn fused_int8_feed_forward(
        x: FloatTensor<Self>,
        norm: Option<NormValues>,
        up: Int8Layer,
        down: Int8Layer,
    ) -> FloatTensor<Self> {
        // Evaluation only: the result is a constant of the graph.
        Autodiff::<B, C>::from_inner(B::fused_int8_feed_forward(x.into_primitive(), norm, up, down))
    }

    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Linear;

        impl<B: FusedBackward> Backward<B, 3> for Linear {
            type State = (FloatTensor<B>, FloatTensor<B>);

            fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
                let (x, w) = ops.state;
                let grad = grads.consume::<B>(&ops.node);
                let need = [0, 1, 2].map(|i| ops.parents[i].is_some());
                let out = B::fused_linear_backward(x, w, grad, need);
                register::<B, _>(grads, ops.parents.map(|p| p.map(|p| p.id)), out);
            }
        }

        let nodes = [x.node(), w.node(), bias.node()];
        match Linear.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (x, w) = (x.into_primitive(), w.into_primitive());
                let out = B::fused_linear(x.clone(), w.clone(), bias.into_primitive());
                prep.finish((x, w), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::fused_linear(
                x.into_primitive(),
                w.into_primitive(),
                bias.into_primitive(),
            )),
        }
    }

    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        key_bias: FloatTensor<Self>,
        drop: Option<Mask>,
        heads: usize,
        scale: f32,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Attention;

        type Saved<B> = ([FloatTensor<B>; 4], Option<Mask>, usize, f32);

        impl<B: FusedBackward> Backward<B, 3> for Attention {
            type State = Saved<B>;

            fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
                let ([q, k, v, p], drop, heads, scale) = ops.state;
                let grad = grads.consume::<B>(&ops.node);
                let out = B::fused_attention_backward(q, k, v, p, drop, grad, heads, scale);
                register::<B, _>(grads, ops.parents.map(|p| p.map(|p| p.id)), out.map(Some));
            }
        }

        // The key bias and the dropout mask are data: never differentiated.
        let key_bias = key_bias.into_primitive();
        let nodes = [q.node(), k.node(), v.node()];
        match Attention.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let [q, k, v] = [q, k, v].map(|t| t.into_primitive());
                let (ctx, p) =
                    B::fused_attention_keep(q.clone(), k.clone(), v.clone(), key_bias, drop, heads, scale);
                prep.finish(([q, k, v, p], drop, heads, scale), ctx)
            }
            OpsKind::UnTracked(prep) => {
                let [q, k, v] = [q, k, v].map(|t| t.into_primitive());
                prep.finish(B::fused_attention(q, k, v, key_bias, drop, heads, scale))
            }
        }
    }

    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct LayerNorm;

        impl<B: FusedBackward> Backward<B, 3> for LayerNorm {
            type State = (FloatTensor<B>, FloatTensor<B>, f64);

            fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
                let (x, gamma, eps) = ops.state;
                let grad = grads.consume::<B>(&ops.node);
                let out = B::fused_layer_norm_backward(x, grad, gamma, eps);
                register::<B, _>(grads, ops.parents.map(|p| p.map(|p| p.id)), out.map(Some));
            }
        }

        if x.primitive().dtype() != DType::F32 {
            return Autodiff::<B, C>::layer_norm(x, gamma, Some(beta), eps);
        }
        let nodes = [x.node(), gamma.node(), beta.node()];
        match LayerNorm.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (x, gamma, beta) = (x.into_primitive(), gamma.into_primitive(), beta.into_primitive());
                let out = B::fused_layer_norm(x.clone(), gamma.clone(), beta, eps);
                prep.finish((x, gamma, eps), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::fused_layer_norm(
                x.into_primitive(),
                gamma.into_primitive(),
                beta.into_primitive(),
                eps,
            )),
        }
    }
}

/// Gives each tracked parent its gradient.
fn register<B: Backend, const N: usize>(
    grads: &mut Gradients,
    parents: [Option<NodeId>; N],
    out: [Option<FloatTensor<B>>; N],
) {
    for (parent, g) in parents.into_iter().zip(out) {
        if let (Some(parent), Some(g)) = (parent, g) {
            grads.register::<B>(parent, g);
        }
    }
}
