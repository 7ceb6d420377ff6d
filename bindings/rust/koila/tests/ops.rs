//! Every operator through the binding, against values computed by hand; each is built
//! once on concrete inputs and once on lazy ones (the two must agree).
mod common;

use common::assert_close;
use koila::{DType, Reduction, Tensor};

fn t(data: &[f32], shape: &[i64]) -> Tensor {
    Tensor::from_slice(data, shape).unwrap()
}

fn lazy(x: &Tensor) -> Tensor {
    x.lazy(0).unwrap()
}

/// The values of `f(inputs)` built eagerly and lazily (first input lazy), checked equal.
fn both(inputs: &[&Tensor], f: impl Fn(&[&Tensor]) -> koila::Result<Tensor>) -> Vec<f32> {
    let eager = f(inputs).unwrap();
    assert!(!eager.is_lazy().unwrap());
    let first = lazy(inputs[0]);
    let mut with_lazy: Vec<&Tensor> = vec![&first];
    with_lazy.extend_from_slice(&inputs[1..]);
    let deferred = f(&with_lazy).unwrap();
    assert!(deferred.is_lazy().unwrap());
    assert_eq!(deferred.shape().unwrap(), eager.shape().unwrap());
    let e = eager.to_vec::<f32>().unwrap();
    assert_close(&deferred.to_vec::<f32>().unwrap(), &e, 1e-6);
    e
}

fn bools(x: &Tensor) -> Vec<bool> {
    assert_eq!(x.dtype().unwrap(), DType::Bool);
    x.to_vec::<bool>().unwrap()
}

#[test]
fn binary_and_scalar() {
    let a = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let b = t(&[5.0, 6.0, 7.0, 8.0], &[2, 2]);
    assert_eq!(both(&[&a, &b], |x| x[0].add(x[1])), vec![6.0, 8.0, 10.0, 12.0]);
    assert_eq!(both(&[&a, &b], |x| x[0].sub(x[1])), vec![-4.0; 4]);
    assert_eq!(both(&[&a, &b], |x| x[0].mul(x[1])), vec![5.0, 12.0, 21.0, 32.0]);
    assert_close(&both(&[&a, &b], |x| x[0].div(x[1])), &[0.2, 1.0 / 3.0, 3.0 / 7.0, 0.5], 1e-6);
    assert_eq!(both(&[&a, &b], |x| x[0].pow(x[1])), vec![1.0, 64.0, 2187.0, 65536.0]);
    assert_eq!(both(&[&a, &b], |x| x[0].matmul(x[1])), vec![19.0, 22.0, 43.0, 50.0]);
    let c = t(&[3.0, 0.0, 3.0, 9.0], &[2, 2]);
    assert_eq!(both(&[&a, &c], |x| x[0].maximum(x[1])), vec![3.0, 2.0, 3.0, 9.0]);
    assert_eq!(both(&[&a, &c], |x| x[0].minimum(x[1])), vec![1.0, 0.0, 3.0, 4.0]);
    // Broadcasting a row.
    let row = t(&[10.0, 20.0], &[2]);
    assert_eq!(both(&[&a, &row], |x| x[0].add(x[1])), vec![11.0, 22.0, 13.0, 24.0]);
    // Comparisons give Bool.
    assert_eq!(bools(&a.eq_tensor(&c).unwrap()), vec![false, false, true, false]);
    assert_eq!(bools(&a.ne_tensor(&c).unwrap()), vec![true, true, false, true]);
    assert_eq!(bools(&lazy(&a).lt_tensor(&c).unwrap()), vec![true, false, false, true]);
    assert_eq!(bools(&a.le_tensor(&c).unwrap()), vec![true, false, true, true]);
    assert_eq!(bools(&a.gt_tensor(&c).unwrap()), vec![false, true, false, false]);
    assert_eq!(bools(&a.ge_tensor(&c).unwrap()), vec![false, true, true, false]);
    // With a scalar.
    assert_eq!(both(&[&a], |x| x[0].add_scalar(1.5)), vec![2.5, 3.5, 4.5, 5.5]);
    assert_eq!(both(&[&a], |x| x[0].sub_scalar(1.0)), vec![0.0, 1.0, 2.0, 3.0]);
    assert_eq!(both(&[&a], |x| x[0].mul_scalar(-2.0)), vec![-2.0, -4.0, -6.0, -8.0]);
    assert_eq!(both(&[&a], |x| x[0].div_scalar(4.0)), vec![0.25, 0.5, 0.75, 1.0]);
    assert_eq!(both(&[&a], |x| x[0].pow_scalar(2.0)), vec![1.0, 4.0, 9.0, 16.0]);
    // Integer division is true division.
    let i = Tensor::from_slice(&[1i64, 3], &[2]).unwrap();
    let j = Tensor::from_slice(&[2i64, 2], &[2]).unwrap();
    let q = i.div(&j).unwrap();
    assert!(q.dtype().unwrap().is_floating());
    assert_eq!(q.to_vec::<f32>().unwrap(), vec![0.5, 1.5]);
}

#[test]
fn unary() {
    let v = [-1.5f32, -0.25, 0.5, 2.0];
    let x = t(&v, &[4]);
    let map = |f: fn(f32) -> f32| v.iter().map(|&a| f(a)).collect::<Vec<f32>>();
    fn sig(a: f32) -> f32 {
        1.0 / (1.0 + (-a).exp())
    }
    assert_eq!(both(&[&x], |x| x[0].neg()), map(|a| -a));
    assert_eq!(both(&[&x], |x| x[0].abs()), map(f32::abs));
    assert_close(&both(&[&x], |x| x[0].exp()), &map(f32::exp), 1e-6);
    assert_close(&both(&[&x], |x| x[0].sin()), &map(f32::sin), 1e-6);
    assert_close(&both(&[&x], |x| x[0].cos()), &map(f32::cos), 1e-6);
    assert_close(&both(&[&x], |x| x[0].tanh()), &map(f32::tanh), 1e-6);
    assert_close(&both(&[&x], |x| x[0].sigmoid()), &map(sig), 1e-6);
    assert_eq!(both(&[&x], |x| x[0].relu()), map(|a| a.max(0.0)));
    assert_close(&both(&[&x], |x| x[0].silu()), &map(|a| a * sig(a)), 1e-6);
    assert_close(&both(&[&x], |x| x[0].leaky_relu(0.1)), &map(|a| if a > 0.0 { a } else { 0.1 * a }), 1e-6);
    assert_eq!(both(&[&x], |x| x[0].clamp(-1.0, 1.0)), vec![-1.0, -0.25, 0.5, 1.0]);
    // gelu(x) = x Φ(x): Φ(2) = 0.97724987, Φ(-1.5) = 0.0668072, Φ(0.5) = 0.69146246, Φ(-0.25) = 0.40129367.
    assert_close(&both(&[&x], |x| x[0].gelu()), &[-1.5 * 0.0668072, -0.25 * 0.40129367, 0.5 * 0.69146246, 2.0 * 0.97724987], 1e-5);
    let p = t(&[0.25, 1.0, 4.0, 9.0], &[4]);
    assert_close(&both(&[&p], |x| x[0].log()), &[-(4f32.ln()), 0.0, 4f32.ln(), 9f32.ln()], 1e-6);
    assert_eq!(both(&[&p], |x| x[0].sqrt()), vec![0.5, 1.0, 2.0, 3.0]);
    assert_close(&both(&[&p], |x| x[0].rsqrt()), &[2.0, 1.0, 0.5, 1.0 / 3.0], 1e-6);
    // softmax over dim 1 of [[0, ln 3], [0, 0]] = [[0.25, 0.75], [0.5, 0.5]].
    let s = t(&[0.0, 3f32.ln(), 0.0, 0.0], &[2, 2]);
    assert_close(&both(&[&s], |x| x[0].softmax(1)), &[0.25, 0.75, 0.5, 0.5], 1e-6);
    assert_close(&both(&[&s], |x| x[0].log_softmax(-1)), &[0.25f32.ln(), 0.75f32.ln(), 0.5f32.ln(), 0.5f32.ln()], 1e-6);
    // Dropout: off passes through; p = 1 in training zeroes.
    assert_eq!(both(&[&x], |x| x[0].dropout(0.5, false)), v.to_vec());
    assert_eq!(lazy(&x).dropout(1.0, true).unwrap().to_vec::<f32>().unwrap(), vec![0.0; 4]);
}

#[test]
fn linear_algebra_and_nn() {
    // linear: x [2, 3] @ w^T [3, 2] + b.
    let x = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let w = t(&[1.0, 0.0, -1.0, 0.5, 0.5, 0.5], &[2, 3]);
    let b = t(&[10.0, 20.0], &[2]);
    assert_eq!(both(&[&x, &w, &b], |x| x[0].linear(x[1], Some(x[2]))), vec![8.0, 23.0, 8.0, 27.5]);
    assert_eq!(both(&[&x, &w], |x| x[0].linear(x[1], None)), vec![-2.0, 3.0, -2.0, 7.5]);
    // conv1d of [1, 1, 5] with a [1, 1, 2] kernel of ones: sums of neighbours.
    let s = t(&[1.0, 2.0, 3.0, 4.0, 5.0], &[1, 1, 5]);
    let k = t(&[1.0, 1.0], &[1, 1, 2]);
    assert_eq!(both(&[&s, &k], |x| x[0].conv1d(x[1], None, None, None, None, 1)), vec![3.0, 5.0, 7.0, 9.0]);
    assert_eq!(both(&[&s, &k], |x| x[0].conv1d(x[1], None, Some(2), Some(1), None, 1)), vec![1.0, 5.0, 9.0]);
    // conv2d of a 3x3 image 1..9 with a 2x2 kernel of ones, bias 1.
    let img = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], &[1, 1, 3, 3]);
    let k2 = t(&[1.0; 4], &[1, 1, 2, 2]);
    let one = t(&[1.0], &[1]);
    assert_eq!(both(&[&img, &k2, &one], |x| x[0].conv2d(x[1], Some(x[2]), None, None, None, 1)), vec![13.0, 17.0, 25.0, 29.0]);
    assert_eq!(both(&[&img, &k2], |x| x[0].conv2d(x[1], None, Some([2, 2]), Some([1, 1]), Some([1, 1]), 1)), vec![1.0, 5.0, 11.0, 28.0]);
    // Pools.
    assert_eq!(both(&[&img], |x| x[0].max_pool2d([2, 2], Some([1, 1]), None, false)), vec![5.0, 6.0, 8.0, 9.0]);
    assert_eq!(both(&[&img], |x| x[0].max_pool2d([2, 2], None, None, true)), vec![5.0, 6.0, 8.0, 9.0]);
    assert_eq!(both(&[&img], |x| x[0].avg_pool2d([2, 2], Some([1, 1]), None, false)), vec![3.0, 4.0, 6.0, 7.0]);
    assert_eq!(both(&[&img], |x| x[0].adaptive_avg_pool2d([1, 1])), vec![5.0]);
    // Nearest upsampling of [1, 1, 2, 2] by 1 x 2: each pixel twice along the rows.
    let four = t(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
    assert_eq!(both(&[&four], |x| x[0].upsample_nearest2d([1, 2])), vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]);
    assert!(four.upsample_nearest2d([0, 2]).is_err());
    // batch_norm with running statistics (evaluation): (x - mean) / sqrt(var + eps) * w + b.
    let bx = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let (rm, rv) = (t(&[1.0, 2.0], &[2]), t(&[4.0, 1.0], &[2]));
    let (bw, bb) = (t(&[2.0, 1.0], &[2]), t(&[0.0, 1.0], &[2]));
    assert_close(
        &both(&[&bx, &bw, &bb, &rm, &rv], |x| x[0].batch_norm(Some(x[1]), Some(x[2]), Some(x[3]), Some(x[4]), false, 0.1, 1e-12)),
        &[0.0, 1.0, 2.0, 3.0],
        1e-6,
    );
    // In training: the batch's statistics, mean [2, 3], biased var [1, 1].
    assert_close(&bx.batch_norm(None, None, None, None, true, 0.1, 1e-12).unwrap().to_vec::<f32>().unwrap(), &[-1.0, -1.0, 1.0, 1.0], 1e-6);
    // layer_norm over the last dim of [[1, 3], [2, 2]].
    let lx = t(&[1.0, 3.0, 2.0, 2.0], &[2, 2]);
    assert_close(&both(&[&lx], |x| x[0].layer_norm(&[2], None, None, 1e-12)), &[-1.0, 1.0, 0.0, 0.0], 1e-6);
    assert_close(&both(&[&lx, &bw, &bb], |x| x[0].layer_norm(&[2], Some(x[1]), Some(x[2]), 1e-12)), &[-2.0, 2.0, 0.0, 1.0], 1e-6);
    // embedding: rows 2, 0 of a [3, 2] table.
    let table = t(&[0.0, 1.0, 10.0, 11.0, 20.0, 21.0], &[3, 2]);
    let idx = Tensor::from_slice(&[2i64, 0], &[2]).unwrap();
    let e = table.embedding(&lazy(&idx)).unwrap();
    assert_eq!((e.shape().unwrap(), e.batch_dim().unwrap()), (vec![2, 2], Some(0)));
    assert_eq!(e.to_vec::<f32>().unwrap(), vec![20.0, 21.0, 0.0, 1.0]);
    // Attention with one key: the output is that key's value whatever the scores.
    let q = t(&[1.0, 0.0, 0.0, 1.0], &[1, 2, 2]);
    let kk = t(&[3.0, -1.0], &[1, 1, 2]);
    let vv = t(&[7.0, 8.0, 9.0], &[1, 1, 3]);
    let o = both(&[&q, &kk, &vv], |x| Tensor::scaled_dot_product_attention(x[0], x[1], x[2], None, false));
    assert_eq!(o, vec![7.0, 8.0, 9.0, 7.0, 8.0, 9.0]);
    // Two keys, causal: query 0 sees key 0 only; query 1 weighs both by softmax(q.k/sqrt 2).
    let k2 = t(&[1.0, 0.0, 0.0, 1.0], &[1, 2, 2]);
    let v2 = t(&[1.0, 0.0], &[1, 2, 1]);
    let o = both(&[&q, &k2, &v2], |x| Tensor::scaled_dot_product_attention(x[0], x[1], x[2], None, true));
    let s = 1.0 / 2f32.sqrt();
    assert_close(&o, &[1.0, 1.0 / (1.0 + s.exp())], 1e-6);
    // A Bool mask keeping only key 1.
    let mask = Tensor::from_slice(&[false, true], &[1, 2]).unwrap();
    let o = both(&[&q, &k2, &v2, &mask], |x| Tensor::scaled_dot_product_attention(x[0], x[1], x[2], Some(x[3]), false));
    assert_eq!(o, vec![0.0, 0.0]);
}

#[test]
fn reductions() {
    let x = t(&[1.0, 5.0, 3.0, 4.0, 2.0, 6.0], &[2, 3]);
    assert_eq!(both(&[&x], |x| x[0].sum(&[], false)), vec![21.0]);
    assert_eq!(both(&[&x], |x| x[0].sum(&[1], false)), vec![9.0, 12.0]);
    assert_eq!(both(&[&x], |x| x[0].mean(&[0], false)), vec![2.5, 3.5, 4.5]);
    let k = x.mean(&[1], true).unwrap();
    assert_eq!(k.shape().unwrap(), vec![2, 1]);
    assert_eq!(both(&[&x], |x| x[0].amax(&[1], false)), vec![5.0, 6.0]);
    assert_eq!(both(&[&x], |x| x[0].amin(&[0, 1], false)), vec![1.0]);
    let am = lazy(&x).argmax(1, false).unwrap();
    assert_eq!(am.dtype().unwrap(), DType::Int64);
    assert_eq!(am.to_vec::<i64>().unwrap(), vec![1, 2]);
    assert_eq!(x.argmax(0, true).unwrap().shape().unwrap(), vec![1, 3]);
}

#[test]
fn shape_ops() {
    let x = t(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3]);
    assert_eq!(both(&[&x], |x| x[0].reshape(&[3, -1])), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(both(&[&x], |x| x[0].transpose(0, 1)), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    assert_eq!(both(&[&x], |x| x[0].permute(&[1, 0])), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    let f = x.reshape(&[2, 3, 1]).unwrap().flatten(1, -1).unwrap();
    assert_eq!(f.shape().unwrap(), vec![2, 3]);
    let u = lazy(&x).unsqueeze(1).unwrap();
    assert_eq!(u.shape().unwrap(), vec![2, 1, 3]);
    assert_eq!(u.squeeze(1).unwrap().shape().unwrap(), vec![2, 3]);
    assert_eq!(x.squeeze(0).unwrap().shape().unwrap(), vec![2, 3]);
    assert_eq!(both(&[&x], |x| x[0].narrow(1, 1, 2)), vec![1.0, 2.0, 4.0, 5.0]);
    let idx = Tensor::from_slice(&[2i64, 0], &[2]).unwrap();
    assert_eq!(both(&[&x, &idx], |x| x[0].index_select(1, x[1])), vec![2.0, 0.0, 5.0, 3.0]);
    let y = t(&[9.0, 9.0, 9.0], &[1, 3]);
    assert_eq!(both(&[&x, &y], |x| Tensor::cat(&[x[0], x[1]], 0)), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 9.0, 9.0, 9.0]);
    let z = t(&[6.0, 7.0, 8.0, 9.0, 10.0, 11.0], &[2, 3]);
    let s = Tensor::stack(&[&lazy(&x), &lazy(&z)], 1).unwrap();
    assert_eq!((s.shape().unwrap(), s.batch_dim().unwrap()), (vec![2, 2, 3], Some(0)));
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 6.0, 7.0, 8.0, 3.0, 4.0, 5.0, 9.0, 10.0, 11.0]);
}

#[test]
fn losses() {
    // Logits [2, 3], targets [2, 1]: cross entropy by hand.
    let logits = t(&[1.0, 2.0, 3.0, 1.0, 1.0, 1.0], &[2, 3]);
    let target = Tensor::from_slice(&[2i64, 0], &[2]).unwrap();
    let lse0 = (1f32.exp() + 2f32.exp() + 3f32.exp()).ln();
    let ce = [lse0 - 3.0, 3f32.ln()];
    assert_close(&both(&[&logits, &target], |x| x[0].cross_entropy(x[1], Reduction::None)), &ce, 1e-6);
    assert_close(&both(&[&logits, &target], |x| x[0].cross_entropy(x[1], Reduction::Mean)), &[(ce[0] + ce[1]) / 2.0], 1e-6);
    assert_close(&both(&[&logits, &target], |x| x[0].cross_entropy(x[1], Reduction::Sum)), &[ce[0] + ce[1]], 1e-6);
    let lp = logits.log_softmax(1).unwrap();
    assert_close(&both(&[&lp, &target], |x| x[0].nll_loss(x[1], Reduction::Mean)), &[(ce[0] + ce[1]) / 2.0], 1e-6);
    let a = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let b = t(&[0.0, 2.0, 5.0, 4.0], &[2, 2]);
    assert_eq!(both(&[&a, &b], |x| x[0].mse_loss(x[1], Reduction::Mean)), vec![1.25]);
    assert_eq!(both(&[&a, &b], |x| x[0].l1_loss(x[1], Reduction::Sum)), vec![3.0]);
    assert_eq!(both(&[&a, &b], |x| x[0].mse_loss(x[1], Reduction::None)), vec![1.0, 0.0, 4.0, 0.0]);
    // BCE with logits: -[y log σ(z) + (1-y) log(1-σ(z))].
    let z = t(&[0.0, 2.0], &[2]);
    let y = t(&[1.0, 0.0], &[2]);
    let sig2 = 1.0 / (1.0 + (-2f32).exp());
    assert_close(
        &both(&[&z, &y], |x| x[0].binary_cross_entropy_with_logits(x[1], Reduction::None)),
        &[2f32.ln(), -(1.0 - sig2).ln()],
        1e-6,
    );
}
