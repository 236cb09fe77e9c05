//! GELU, softmax and LayerNorm as single Burn operations with their own backward passes.
//!
//! Under autodiff Burn builds softmax and LayerNorm from five to ten small operations, each
//! allocating a tensor and recording a backward step, and computes GELU through a per-element
//! `erff` call. Here each is one operation: the forward runs one kernel (Burn flex's own fused
//! softmax and LayerNorm, this crate's GELU), the backward one kernel of [`crate::math`].
//! Burn's backend-extension mechanism routes a call to the flex implementation or, on an
//! autodiff device, to the implementation that records the backward step.

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

use crate::int8::{self, Int8Weights};
use crate::math;

/// The fused operations, on any backend that implements them (flex, and autodiff over flex).
#[backend_extension(Flex, Autodiff)]
pub trait Fused: Backend {
    /// GELU, exact (erf) form.
    fn fused_gelu(x: FloatTensor<Self>) -> FloatTensor<Self>;
    /// Softmax over the last dimension of `x · scale + mask`, the mask a constant whose rows each
    /// cover a consecutive block of `x`'s rows (attention's `[batch, 1, 1, keys]` key mask).
    fn fused_softmax(x: FloatTensor<Self>, mask: FloatTensor<Self>, scale: f32) -> FloatTensor<Self>;
    /// `x · W + bias` over the last dimension with int8 weights ([`crate::int8::linear`]); not
    /// differentiated (an int8 model only evaluates).
    fn fused_int8_linear(
        x: FloatTensor<Self>,
        weights: std::sync::Arc<Int8Weights>,
        bias: Option<std::sync::Arc<[f32]>>,
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
    /// ∂L/∂x, ∂L/∂gamma, ∂L/∂beta of a LayerNorm at `x`, given ∂L/∂y.
    fn fused_layer_norm_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        eps: f64,
    ) -> [FloatTensor<Self>; 3];
}

/// A contiguous f32 copy (or view) of a flex tensor.
fn contiguous(t: &FlexTensor) -> FlexTensor {
    t.to_contiguous()
}

fn values(t: &FlexTensor) -> &[f32] {
    t.as_slice::<f32>()
        .expect("contiguous f32 tensor (checked by the caller)")
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
        flex(math::gelu_all(values(&x)), x.shape())
    }

    fn fused_softmax(x: FloatTensor<Self>, mask: FloatTensor<Self>, scale: f32) -> FloatTensor<Self> {
        let (x, mask) = (contiguous(&x), contiguous(&mask));
        let shape = x.shape();
        let row = shape[shape.num_dims() - 1];
        flex(math::softmax(values(&x), values(&mask), scale, row), shape)
    }

    fn fused_int8_linear(
        x: FloatTensor<Self>,
        weights: std::sync::Arc<Int8Weights>,
        bias: Option<std::sync::Arc<[f32]>>,
    ) -> FloatTensor<Self> {
        let x = contiguous(&x);
        let mut shape = x.shape();
        let last = shape.num_dims() - 1;
        shape[last] = weights.outputs();
        flex(int8::linear(values(&x), &weights, bias.as_deref()), shape)
    }

    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
    ) -> FloatTensor<Self> {
        Flex::layer_norm(x, gamma, Some(beta), eps)
    }
}

impl FusedBackward for Flex {
    fn fused_gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        let (x, g) = (contiguous(&x), contiguous(&grad));
        flex(math::gelu_backward(values(&x), values(&g)), x.shape())
    }

    fn fused_softmax_backward(
        y: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        scale: f32,
    ) -> FloatTensor<Self> {
        let (y, g) = (contiguous(&y), contiguous(&grad));
        let shape = y.shape();
        let row = shape[shape.num_dims() - 1];
        flex(math::softmax_backward(values(&y), values(&g), row, scale), shape)
    }

    fn fused_layer_norm_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        eps: f64,
    ) -> [FloatTensor<Self>; 3] {
        let (x, g, gamma) = (contiguous(&x), contiguous(&grad), contiguous(&gamma));
        let grads = math::layer_norm_backward(values(&x), values(&g), values(&gamma), eps as f32);
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

    fn fused_int8_linear(
        x: FloatTensor<Self>,
        weights: std::sync::Arc<Int8Weights>,
        bias: Option<std::sync::Arc<[f32]>>,
    ) -> FloatTensor<Self> {
        // Evaluation only: the result is a constant of the graph.
        Autodiff::<B, C>::from_inner(B::fused_int8_linear(x.into_primitive(), weights, bias))
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
                for (parent, g) in ops.parents.into_iter().zip(out) {
                    if let Some(parent) = parent {
                        grads.register::<B>(parent.id, g);
                    }
                }
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
