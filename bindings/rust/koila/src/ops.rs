//! Operators. Each returns a new tensor: lazy when any input is lazy, else computed at
//! once. Shape and dtype errors come from the call that builds the op, never later.
//! Dims are koila's (0-based; negative counts from the end), as in PyTorch.
use std::ptr;

use crate::error::{Code, Error, Result};
use crate::tensor::{make, maybe_ptr, or_null, pointers, Tensor};
use koila_sys as sys;

/// How a loss reduces over its elements (koila.h's `koila_reduction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// One loss per element.
    None,
    /// The mean; chunked runs scale it exactly (also for uneven chunks).
    Mean,
    /// The sum.
    Sum,
}

impl Reduction {
    fn raw(self) -> sys::koila_reduction {
        match self {
            Reduction::None => sys::KOILA_REDUCTION_NONE,
            Reduction::Mean => sys::KOILA_REDUCTION_MEAN,
            Reduction::Sum => sys::KOILA_REDUCTION_SUM,
        }
    }
}

fn opt_array<const N: usize>(a: &Option<[i64; N]>) -> *const i64 {
    a.as_ref().map_or(ptr::null(), |a| a.as_ptr())
}

fn list(ts: &[&Tensor], what: &str) -> Result<Vec<*mut sys::koila_tensor>> {
    if ts.is_empty() {
        return Err(Error::new(Code::InvalidArgument, format!("{what}: no tensors given")));
    }
    Ok(pointers(ts))
}

macro_rules! binary {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
            make(|out| unsafe { sys::$c(out, self.as_ptr(), other.as_ptr()) })
        }
    )*};
}

macro_rules! scalar {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self, s: f64) -> Result<Tensor> {
            make(|out| unsafe { sys::$c(out, self.as_ptr(), s) })
        }
    )*};
}

macro_rules! unary {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self) -> Result<Tensor> {
            make(|out| unsafe { sys::$c(out, self.as_ptr()) })
        }
    )*};
}

macro_rules! reduction {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
            make(|out| unsafe { sys::$c(out, self.as_ptr(), or_null(dims), dims.len(), keepdim as i32) })
        }
    )*};
}

macro_rules! loss {
    ($($(#[$doc:meta])* $name:ident => $c:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
            make(|out| unsafe { sys::$c(out, self.as_ptr(), target.as_ptr(), reduction.raw()) })
        }
    )*};
}

impl Tensor {
    binary! {
        /// Elementwise sum, broadcasting.
        add => koila_add;
        /// Elementwise difference, broadcasting.
        sub => koila_sub;
        /// Elementwise product, broadcasting.
        mul => koila_mul;
        /// True division (integer inputs give a floating result).
        div => koila_div;
        /// Elementwise power.
        pow => koila_pow;
        /// Elementwise maximum.
        maximum => koila_maximum;
        /// Elementwise minimum.
        minimum => koila_minimum;
        /// `self == other`, elementwise (Bool).
        eq_tensor => koila_eq;
        /// `self != other`, elementwise (Bool).
        ne_tensor => koila_ne;
        /// `self < other`, elementwise (Bool).
        lt_tensor => koila_lt;
        /// `self <= other`, elementwise (Bool).
        le_tensor => koila_le;
        /// `self > other`, elementwise (Bool).
        gt_tensor => koila_gt;
        /// `self >= other`, elementwise (Bool).
        ge_tensor => koila_ge;
        /// Matrix product as torch.matmul (1-D, 2-D and broadcast batched cases).
        matmul => koila_matmul;
    }

    scalar! {
        /// `self + s`.
        add_scalar => koila_add_scalar;
        /// `self - s`.
        sub_scalar => koila_sub_scalar;
        /// `self * s`.
        mul_scalar => koila_mul_scalar;
        /// `self / s`.
        div_scalar => koila_div_scalar;
        /// `self ^ s`.
        pow_scalar => koila_pow_scalar;
        /// max(x, 0) + slope * min(x, 0).
        leaky_relu => koila_leaky_relu;
    }

    unary! {
        /// `-x`.
        neg => koila_neg;
        /// `|x|`.
        abs => koila_abs;
        /// `e^x`.
        exp => koila_exp;
        /// Natural logarithm.
        log => koila_log;
        /// Square root.
        sqrt => koila_sqrt;
        /// `1 / sqrt(x)`.
        rsqrt => koila_rsqrt;
        /// Sine.
        sin => koila_sin;
        /// Cosine.
        cos => koila_cos;
        /// Hyperbolic tangent.
        tanh => koila_tanh;
        /// Logistic sigmoid.
        sigmoid => koila_sigmoid;
        /// max(x, 0).
        relu => koila_relu;
        /// GELU (exact, erf form).
        gelu => koila_gelu;
        /// SiLU (x * sigmoid(x)).
        silu => koila_silu;
    }

    reduction! {
        /// Sum over `dims` (all dims when empty).
        sum => koila_sum;
        /// Mean over `dims` (all dims when empty).
        mean => koila_mean;
        /// Maximum over `dims` (all dims when empty).
        amax => koila_amax;
        /// Minimum over `dims` (all dims when empty).
        amin => koila_amin;
    }

    loss! {
        /// Cross entropy of logits [N, C, ...] against class indices [N, ...] (Int64) or
        /// class probabilities shaped like the logits. Index -100 is ignored.
        cross_entropy => koila_cross_entropy;
        /// Negative log likelihood of log-probabilities against class indices.
        nll_loss => koila_nll_loss;
        /// Mean squared error.
        mse_loss => koila_mse_loss;
        /// Mean absolute error.
        l1_loss => koila_l1_loss;
        /// Binary cross entropy of logits against targets in [0, 1].
        binary_cross_entropy_with_logits => koila_binary_cross_entropy_with_logits;
    }

    /// Clamps into [lo, hi] (values end at hi when lo > hi, as in PyTorch).
    pub fn clamp(&self, lo: f64, hi: f64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_clamp(out, self.as_ptr(), lo, hi) })
    }

    /// Softmax along `dim`.
    pub fn softmax(&self, dim: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_softmax(out, self.as_ptr(), dim) })
    }

    /// Log-softmax along `dim`.
    pub fn log_softmax(&self, dim: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_log_softmax(out, self.as_ptr(), dim) })
    }

    /// Dropout with probability `p` (0 ≤ p ≤ 1); with `train` false the input passes
    /// through unchanged.
    pub fn dropout(&self, p: f64, train: bool) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_dropout(out, self.as_ptr(), p, train as i32) })
    }

    /// `self @ weight^T + bias` with weight [out, in].
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_linear(out, self.as_ptr(), weight.as_ptr(), maybe_ptr(bias)) })
    }

    /// 1-D convolution of [N, C, L] (or [C, L]) with weight [out, C/groups, k]. `None`
    /// takes PyTorch's defaults: stride 1, padding 0, dilation 1.
    pub fn conv1d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        stride: Option<i64>,
        padding: Option<i64>,
        dilation: Option<i64>,
        groups: i64,
    ) -> Result<Tensor> {
        let (s, p, d) = (stride.map(|v| [v]), padding.map(|v| [v]), dilation.map(|v| [v]));
        make(|out| unsafe {
            sys::koila_conv1d(out, self.as_ptr(), weight.as_ptr(), maybe_ptr(bias), opt_array(&s), opt_array(&p), opt_array(&d), groups)
        })
    }

    /// 2-D convolution of [N, C, H, W] (or [C, H, W]) with weight [out, C/groups, kh, kw].
    /// `None` takes PyTorch's defaults: stride 1, padding 0, dilation 1.
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        stride: Option<[i64; 2]>,
        padding: Option<[i64; 2]>,
        dilation: Option<[i64; 2]>,
        groups: i64,
    ) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_conv2d(out, self.as_ptr(), weight.as_ptr(), maybe_ptr(bias), opt_array(&stride), opt_array(&padding), opt_array(&dilation), groups)
        })
    }

    /// 2-D max pooling; stride `None` is the kernel size, padding `None` is 0.
    pub fn max_pool2d(&self, kernel: [i64; 2], stride: Option<[i64; 2]>, padding: Option<[i64; 2]>, ceil_mode: bool) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_max_pool2d(out, self.as_ptr(), kernel.as_ptr(), opt_array(&stride), opt_array(&padding), ceil_mode as i32)
        })
    }

    /// 2-D average pooling; stride `None` is the kernel size, padding `None` is 0.
    pub fn avg_pool2d(&self, kernel: [i64; 2], stride: Option<[i64; 2]>, padding: Option<[i64; 2]>, ceil_mode: bool) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_avg_pool2d(out, self.as_ptr(), kernel.as_ptr(), opt_array(&stride), opt_array(&padding), ceil_mode as i32)
        })
    }

    /// Adaptive average pooling to `output_size` [h, w].
    pub fn adaptive_avg_pool2d(&self, output_size: [i64; 2]) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_adaptive_avg_pool2d(out, self.as_ptr(), output_size.as_ptr()) })
    }

    /// Batch normalization over every dim but dim 1. In training it uses the batch's
    /// statistics (mixing samples, so koila does not split it unless
    /// [`set_batch_stats`](crate::set_batch_stats) allows statistics per chunk) and updates
    /// the running statistics, when given, each time it is evaluated.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        running_mean: Option<&Tensor>,
        running_var: Option<&Tensor>,
        training: bool,
        momentum: f64,
        eps: f64,
    ) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_batch_norm(
                out,
                self.as_ptr(),
                maybe_ptr(weight),
                maybe_ptr(bias),
                maybe_ptr(running_mean),
                maybe_ptr(running_var),
                training as i32,
                momentum,
                eps,
            )
        })
    }

    /// Layer normalization over the trailing `normalized_shape`.
    pub fn layer_norm(&self, normalized_shape: &[i64], weight: Option<&Tensor>, bias: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_layer_norm(out, self.as_ptr(), normalized_shape.as_ptr(), normalized_shape.len(), maybe_ptr(weight), maybe_ptr(bias), eps)
        })
    }

    /// Rows of this weight [num, dim] picked by integer `indices` of any shape:
    /// the result is `indices.shape + [dim]`.
    pub fn embedding(&self, indices: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_embedding(out, self.as_ptr(), indices.as_ptr()) })
    }

    /// Int64 indices of the largest value along `dim`.
    pub fn argmax(&self, dim: i64, keepdim: bool) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_argmax(out, self.as_ptr(), dim, keepdim as i32) })
    }

    /// The same values with a new shape (one -1 allowed). The batch dim follows.
    pub fn reshape(&self, shape: &[i64]) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_reshape(out, self.as_ptr(), shape.as_ptr(), shape.len()) })
    }

    /// Dims reordered.
    pub fn permute(&self, dims: &[i64]) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_permute(out, self.as_ptr(), dims.as_ptr(), dims.len()) })
    }

    /// Two dims swapped.
    pub fn transpose(&self, d0: i64, d1: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_transpose(out, self.as_ptr(), d0, d1) })
    }

    /// Dims `start..=end` merged into one.
    pub fn flatten(&self, start: i64, end: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_flatten(out, self.as_ptr(), start, end) })
    }

    /// Removes `dim` when its size is 1 (else the shape is unchanged).
    pub fn squeeze(&self, dim: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_squeeze(out, self.as_ptr(), dim) })
    }

    /// Inserts a dim of size 1 at `dim`.
    pub fn unsqueeze(&self, dim: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_unsqueeze(out, self.as_ptr(), dim) })
    }

    /// `length` entries of `dim` from `start`.
    pub fn narrow(&self, dim: i64, start: i64, length: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_narrow(out, self.as_ptr(), dim, start, length) })
    }

    /// Entries of `dim` picked by a 1-D integer `index`.
    pub fn index_select(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_index_select(out, self.as_ptr(), dim, index.as_ptr()) })
    }

    /// Tensors joined along an existing `dim`.
    pub fn cat(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        let ptrs = list(tensors, "cat")?;
        make(|out| unsafe { sys::koila_cat(out, ptrs.as_ptr(), ptrs.len(), dim) })
    }

    /// Tensors of one shape stacked along a new `dim`.
    pub fn stack(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        let ptrs = list(tensors, "stack")?;
        make(|out| unsafe { sys::koila_stack(out, ptrs.as_ptr(), ptrs.len(), dim) })
    }

    /// softmax(q kᵀ / sqrt(E) + mask) v with q [..., L, E], k [..., S, E], v [..., S, Ev].
    /// A Bool `attn_mask` keeps the positions that are true, a floating one is added;
    /// `is_causal` masks j > i and may be combined with a mask.
    pub fn scaled_dot_product_attention(q: &Tensor, k: &Tensor, v: &Tensor, attn_mask: Option<&Tensor>, is_causal: bool) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_scaled_dot_product_attention(out, q.as_ptr(), k.as_ptr(), v.as_ptr(), maybe_ptr(attn_mask), is_causal as i32)
        })
    }
}
