//! Generated from src/ops/ops.toml by scripts/gen_ops.py; edit the table, not this file.
//!
//! The operators' methods on [`Tensor`]; the types and helpers they use are in ops.rs.
use crate::error::Result;
use crate::ops::{list, opt_array, Reduction};
use crate::tensor::{make, maybe_ptr, or_null, Tensor};
use koila_sys as sys;

impl Tensor {
    /// Elementwise sum, broadcasting.
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_add(out, self.as_ptr(), other.as_ptr()) })
    }

    /// Elementwise difference, broadcasting.
    pub fn sub(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_sub(out, self.as_ptr(), other.as_ptr()) })
    }

    /// Elementwise product, broadcasting.
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_mul(out, self.as_ptr(), other.as_ptr()) })
    }

    /// True division (integer inputs give a floating result), broadcasting.
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_div(out, self.as_ptr(), other.as_ptr()) })
    }

    /// Elementwise power, broadcasting.
    pub fn pow(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_pow(out, self.as_ptr(), other.as_ptr()) })
    }

    /// Elementwise maximum, broadcasting.
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_maximum(out, self.as_ptr(), other.as_ptr()) })
    }

    /// Elementwise minimum, broadcasting.
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_minimum(out, self.as_ptr(), other.as_ptr()) })
    }

    /// `a == b`, elementwise (a Bool tensor).
    pub fn eq_tensor(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_eq(out, self.as_ptr(), other.as_ptr()) })
    }

    /// `a != b`, elementwise (a Bool tensor).
    pub fn ne_tensor(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_ne(out, self.as_ptr(), other.as_ptr()) })
    }

    /// `a < b`, elementwise (a Bool tensor).
    pub fn lt_tensor(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_lt(out, self.as_ptr(), other.as_ptr()) })
    }

    /// `a <= b`, elementwise (a Bool tensor).
    pub fn le_tensor(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_le(out, self.as_ptr(), other.as_ptr()) })
    }

    /// `a > b`, elementwise (a Bool tensor).
    pub fn gt_tensor(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_gt(out, self.as_ptr(), other.as_ptr()) })
    }

    /// `a >= b`, elementwise (a Bool tensor).
    pub fn ge_tensor(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_ge(out, self.as_ptr(), other.as_ptr()) })
    }

    /// `a + s`.
    pub fn add_scalar(&self, s: f64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_add_scalar(out, self.as_ptr(), s) })
    }

    /// `a - s`.
    pub fn sub_scalar(&self, s: f64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_sub_scalar(out, self.as_ptr(), s) })
    }

    /// `a * s`.
    pub fn mul_scalar(&self, s: f64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_mul_scalar(out, self.as_ptr(), s) })
    }

    /// `a / s`.
    pub fn div_scalar(&self, s: f64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_div_scalar(out, self.as_ptr(), s) })
    }

    /// `a ^ s`.
    pub fn pow_scalar(&self, s: f64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_pow_scalar(out, self.as_ptr(), s) })
    }

    /// `-x`, elementwise (also `-x` in Julia).
    pub fn neg(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_neg(out, self.as_ptr()) })
    }

    /// `|x|`, elementwise.
    pub fn abs(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_abs(out, self.as_ptr()) })
    }

    /// `e^x`, elementwise.
    pub fn exp(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_exp(out, self.as_ptr()) })
    }

    /// The natural logarithm, elementwise.
    pub fn log(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_log(out, self.as_ptr()) })
    }

    /// The square root, elementwise.
    pub fn sqrt(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_sqrt(out, self.as_ptr()) })
    }

    /// `1 / sqrt(x)`, elementwise.
    pub fn rsqrt(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_rsqrt(out, self.as_ptr()) })
    }

    /// The sine, elementwise.
    pub fn sin(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_sin(out, self.as_ptr()) })
    }

    /// The cosine, elementwise.
    pub fn cos(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_cos(out, self.as_ptr()) })
    }

    /// The hyperbolic tangent, elementwise.
    pub fn tanh(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_tanh(out, self.as_ptr()) })
    }

    /// The logistic sigmoid, elementwise.
    pub fn sigmoid(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_sigmoid(out, self.as_ptr()) })
    }

    /// `max(x, 0)`, elementwise.
    pub fn relu(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_relu(out, self.as_ptr()) })
    }

    /// GELU (exact, erf form), elementwise; x must be floating.
    pub fn gelu(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_gelu(out, self.as_ptr()) })
    }

    /// SiLU (`x * sigmoid(x)`), elementwise; x must be floating.
    pub fn silu(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_silu(out, self.as_ptr()) })
    }

    /// The error function, elementwise (integer inputs give a floating result).
    pub fn erf(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_erf(out, self.as_ptr()) })
    }

    /// Hardswish (`x * relu6(x + 3) / 6`), elementwise; x must be floating.
    pub fn hardswish(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_hardswish(out, self.as_ptr()) })
    }

    /// `max(x, 0) + slope * min(x, 0)`, elementwise.
    pub fn leaky_relu(&self, slope: f64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_leaky_relu(out, self.as_ptr(), slope) })
    }

    /// Clamps into [lo, hi] (values end at hi when lo > hi, as in PyTorch); neither may be NaN.
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

    /// Dropout with probability `p` (0 <= p <= 1); with `train` false the input passes through
    /// unchanged.
    pub fn dropout(&self, p: f64, train: bool) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_dropout(out, self.as_ptr(), p, train as i32) })
    }

    /// The matrix product, as torch.matmul (1-D, 2-D and broadcast batched cases).
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_matmul(out, self.as_ptr(), other.as_ptr()) })
    }

    /// `x @ weight^T + bias` with weight [out, in] and bias [out] (or none).
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_linear(out, self.as_ptr(), weight.as_ptr(), maybe_ptr(bias))
        })
    }

    /// A 1-d convolution of [N, C, L] (or [C, L]) with weight [out, C/groups, k]. A missing stride,
    /// padding or dilation is 1, 0, 1.
    pub fn conv1d(&self, weight: &Tensor, bias: Option<&Tensor>, stride: Option<i64>,
        padding: Option<i64>, dilation: Option<i64>, groups: i64) -> Result<Tensor> {
        let stride = stride.map(|v| [v]);
        let padding = padding.map(|v| [v]);
        let dilation = dilation.map(|v| [v]);
        make(|out| unsafe {
            sys::koila_conv1d(out, self.as_ptr(), weight.as_ptr(), maybe_ptr(bias),
                opt_array(&stride), opt_array(&padding), opt_array(&dilation), groups)
        })
    }

    /// A 2-d convolution of [N, C, H, W] (or [C, H, W]) with weight [out, C/groups, kh, kw]. A
    /// missing stride, padding or dilation is 1, 0, 1.
    pub fn conv2d(&self, weight: &Tensor, bias: Option<&Tensor>, stride: Option<[i64; 2]>,
        padding: Option<[i64; 2]>, dilation: Option<[i64; 2]>, groups: i64) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_conv2d(out, self.as_ptr(), weight.as_ptr(), maybe_ptr(bias),
                opt_array(&stride), opt_array(&padding), opt_array(&dilation), groups)
        })
    }

    /// 2-d max pooling; a missing stride is the kernel size, a missing padding 0.
    pub fn max_pool2d(&self, kernel: [i64; 2], stride: Option<[i64; 2]>, padding: Option<[i64; 2]>,
        ceil_mode: bool) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_max_pool2d(out, self.as_ptr(), kernel.as_ptr(), opt_array(&stride),
                opt_array(&padding), ceil_mode as i32)
        })
    }

    /// 2-d average pooling; a missing stride is the kernel size, a missing padding 0.
    pub fn avg_pool2d(&self, kernel: [i64; 2], stride: Option<[i64; 2]>, padding: Option<[i64; 2]>,
        ceil_mode: bool) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_avg_pool2d(out, self.as_ptr(), kernel.as_ptr(), opt_array(&stride),
                opt_array(&padding), ceil_mode as i32)
        })
    }

    /// Adaptive average pooling to `output_size` [h, w].
    pub fn adaptive_avg_pool2d(&self, output_size: [i64; 2]) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_adaptive_avg_pool2d(out, self.as_ptr(), output_size.as_ptr())
        })
    }

    /// Nearest-neighbour upsampling of the last two dims of [N, C, H, W] (or [C, H, W]) by whole
    /// factors `scale` [sh, sw] (each 1 or more): every pixel repeated sh x sw times, as PyTorch's
    /// F.interpolate(x, scale_factor=(sh, sw), mode="nearest") does. The decoders of U-Nets use it.
    pub fn upsample_nearest2d(&self, scale: [i64; 2]) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_upsample_nearest2d(out, self.as_ptr(), scale.as_ptr()) })
    }

    /// Batch normalization over every dim but dim 1. In training it uses the batch's statistics
    /// (mixing samples, so koila does not split it unless batch statistics per chunk are allowed)
    /// and updates the running statistics, when given, each time it is evaluated.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm(&self, weight: Option<&Tensor>, bias: Option<&Tensor>,
        running_mean: Option<&Tensor>, running_var: Option<&Tensor>, training: bool, momentum: f64,
        eps: f64) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_batch_norm(out, self.as_ptr(), maybe_ptr(weight), maybe_ptr(bias),
                maybe_ptr(running_mean), maybe_ptr(running_var), training as i32, momentum, eps)
        })
    }

    /// Layer normalization over the trailing dims of sizes `normalized_shape`; weight and bias (or
    /// none) are shaped like them.
    pub fn layer_norm(&self, normalized_shape: &[i64], weight: Option<&Tensor>,
        bias: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_layer_norm(out, self.as_ptr(), normalized_shape.as_ptr(),
                normalized_shape.len(), maybe_ptr(weight), maybe_ptr(bias), eps)
        })
    }

    /// Rows of this weight [num, dim] picked by integer `indices` of any shape (0-based): the
    /// result is `indices.shape + [dim]`.
    pub fn embedding(&self, indices: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_embedding(out, self.as_ptr(), indices.as_ptr()) })
    }

    /// The sum over `dims` (all dims when empty).
    pub fn sum(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_sum(out, self.as_ptr(), or_null(dims), dims.len(), keepdim as i32)
        })
    }

    /// The mean over `dims` (all dims when empty).
    pub fn mean(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_mean(out, self.as_ptr(), or_null(dims), dims.len(), keepdim as i32)
        })
    }

    /// The largest values over `dims` (all dims when empty).
    pub fn amax(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_amax(out, self.as_ptr(), or_null(dims), dims.len(), keepdim as i32)
        })
    }

    /// The smallest values over `dims` (all dims when empty).
    pub fn amin(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_amin(out, self.as_ptr(), or_null(dims), dims.len(), keepdim as i32)
        })
    }

    /// Int64 indices of the largest value along `dim`.
    pub fn argmax(&self, dim: i64, keepdim: bool) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_argmax(out, self.as_ptr(), dim, keepdim as i32) })
    }

    /// The same values with a new shape (one -1 allowed). The batch dim follows.
    pub fn reshape(&self, shape: &[i64]) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_reshape(out, self.as_ptr(), shape.as_ptr(), shape.len()) })
    }

    /// The dims reordered: dim i of the result is dim `dims[i]`.
    pub fn permute(&self, dims: &[i64]) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_permute(out, self.as_ptr(), dims.as_ptr(), dims.len()) })
    }

    /// Two dims swapped.
    pub fn transpose(&self, d0: i64, d1: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_transpose(out, self.as_ptr(), d0, d1) })
    }

    /// Dims `start` to `end` (inclusive) merged into one.
    pub fn flatten(&self, start: i64, end: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_flatten(out, self.as_ptr(), start, end) })
    }

    /// Removes `dim` when its size is 1 (else the shape is unchanged, as PyTorch).
    pub fn squeeze(&self, dim: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_squeeze(out, self.as_ptr(), dim) })
    }

    /// Inserts a dim of size 1 at `dim`.
    pub fn unsqueeze(&self, dim: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_unsqueeze(out, self.as_ptr(), dim) })
    }

    /// The tensors joined along the existing dim `dim`.
    pub fn cat(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        let ptrs = list(tensors, "cat")?;
        make(|out| unsafe { sys::koila_cat(out, ptrs.as_ptr(), ptrs.len(), dim) })
    }

    /// The tensors (of one shape) stacked along a new dim `dim`.
    pub fn stack(tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
        let ptrs = list(tensors, "stack")?;
        make(|out| unsafe { sys::koila_stack(out, ptrs.as_ptr(), ptrs.len(), dim) })
    }

    /// `length` entries of `dim` from `start`.
    pub fn narrow(&self, dim: i64, start: i64, length: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_narrow(out, self.as_ptr(), dim, start, length) })
    }

    /// The entries of `dim` picked by the 1-D integer tensor `index` (0-based values).
    pub fn index_select(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_index_select(out, self.as_ptr(), dim, index.as_ptr()) })
    }

    /// The cross entropy of logits [N, C, ...] against class indices [N, ...] (integer) or class
    /// probabilities shaped like the logits. Class index -100 is ignored.
    pub fn cross_entropy(&self, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_cross_entropy(out, self.as_ptr(), target.as_ptr(), reduction.raw())
        })
    }

    /// The negative log likelihood of log-probabilities [N, C, ...] for class indices.
    pub fn nll_loss(&self, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_nll_loss(out, self.as_ptr(), target.as_ptr(), reduction.raw())
        })
    }

    /// The squared error against `target`.
    pub fn mse_loss(&self, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_mse_loss(out, self.as_ptr(), target.as_ptr(), reduction.raw())
        })
    }

    /// The absolute error against `target`.
    pub fn l1_loss(&self, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_l1_loss(out, self.as_ptr(), target.as_ptr(), reduction.raw())
        })
    }

    /// The binary cross entropy of logits against `target` probabilities.
    pub fn binary_cross_entropy_with_logits(&self, target: &Tensor,
        reduction: Reduction) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_binary_cross_entropy_with_logits(out, self.as_ptr(), target.as_ptr(),
                reduction.raw())
        })
    }

    /// `softmax(q k^T / sqrt(E) + mask) v` with q [..., L, E], k [..., S, E], v [..., S, Ev]. A
    /// Bool `attn_mask` keeps the positions that are true, a floating one is added; `is_causal`
    /// masks j > i and may be combined with a mask.
    pub fn scaled_dot_product_attention(q: &Tensor, k: &Tensor, v: &Tensor,
        attn_mask: Option<&Tensor>, is_causal: bool) -> Result<Tensor> {
        make(|out| unsafe {
            sys::koila_scaled_dot_product_attention(out, q.as_ptr(), k.as_ptr(), v.as_ptr(),
                maybe_ptr(attn_mask), is_causal as i32)
        })
    }
}
