//! Autograd, optimizers, TorchScript modules, and chunked training whose gradients equal
//! the unsplit run's.
mod common;

use common::{assert_close, mlp_loss, models_dir, serial, splitting_budget, Budget};
use koila::{AdamOptions, Code, DType, Mode, Module, ModuleKind, Optimizer, Plan, Reduction, SgdOptions, Tensor};

fn param(data: &[f32], shape: &[i64]) -> Tensor {
    let mut p = Tensor::from_slice(data, shape).unwrap();
    p.set_requires_grad(true).unwrap();
    p
}

fn grad(p: &Tensor) -> Vec<f32> {
    p.grad().unwrap().expect("a gradient").to_vec::<f32>().unwrap()
}

#[test]
fn gradients_by_hand() {
    // loss = sum(x @ w) with x [2, 3] lazy: dloss/dw = x^T @ ones = column sums of x.
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let mut w = param(&[0.5, -1.0, 2.0], &[3, 1]);
    assert!(w.grad().unwrap().is_none());
    let loss = x.lazy(0).unwrap().matmul(&w).unwrap().sum(&[], false).unwrap();
    loss.backward().unwrap();
    assert_eq!(grad(&w), vec![5.0, 7.0, 9.0]);
    // Gradients add up, as in PyTorch; zero_grad zeroes in place (old handles see it).
    let g = w.grad().unwrap().unwrap();
    loss.backward().unwrap();
    assert_eq!(grad(&w), vec![10.0, 14.0, 18.0]);
    w.zero_grad().unwrap();
    assert_eq!(g.to_vec::<f32>().unwrap(), vec![0.0; 3]);
    // Backward needs a scalar.
    let not_scalar = x.lazy(0).unwrap().matmul(&w).unwrap();
    assert_eq!(not_scalar.backward().unwrap_err().code(), Code::InvalidArgument);
    // Integer tensors take no gradient.
    let mut i = Tensor::from_slice(&[1i64], &[1]).unwrap();
    assert_eq!(i.set_requires_grad(true).unwrap_err().code(), Code::DType);
}

#[test]
fn sgd_and_adam_by_hand() {
    // loss = sum(p * p): grad 2p.
    let p = param(&[1.0, -2.0, 3.0], &[3]);
    let loss = p.mul(&p).unwrap().sum(&[], false).unwrap();
    let mut sgd = Optimizer::sgd(&[&p], SgdOptions::new(0.1)).unwrap();
    loss.backward().unwrap();
    sgd.step().unwrap();
    assert_close(&p.to_vec::<f32>().unwrap(), &[0.8, -1.6, 2.4], 1e-6);
    sgd.zero_grad().unwrap();
    assert_eq!(grad(&p), vec![0.0; 3]);

    // Weight decay adds wd * p to the gradient: p - lr (2p + wd p).
    let q = param(&[1.0, 2.0], &[2]);
    let mut sgd = Optimizer::sgd(&[&q], SgdOptions::new(0.1).weight_decay(0.5)).unwrap();
    q.mul(&q).unwrap().sum(&[], false).unwrap().backward().unwrap();
    sgd.step().unwrap();
    assert_close(&q.to_vec::<f32>().unwrap(), &[1.0 - 0.1 * 2.5, 2.0 - 0.1 * 5.0], 1e-6);
    // Momentum: the second step moves by lr (g2 + m g1).
    let r = param(&[1.0], &[1]);
    let mut sgd = Optimizer::sgd(&[&r], SgdOptions::new(0.1).momentum(0.9)).unwrap();
    let lr = r.mul_scalar(3.0).unwrap().sum(&[], false).unwrap(); // constant grad 3
    for _ in 0..2 {
        sgd.zero_grad().unwrap();
        lr.backward().unwrap();
        sgd.step().unwrap();
    }
    assert_close(&r.to_vec::<f32>().unwrap(), &[1.0 - 0.3 - 0.1 * (3.0 + 0.9 * 3.0)], 1e-6);

    // Adam's first step moves each parameter by lr against the gradient's sign
    // (m̂ = g, v̂ = g², update lr g / (|g| + eps)).
    let a = param(&[1.0, -2.0], &[2]);
    let mut adam = Optimizer::adam(&[&a], AdamOptions::new(0.01)).unwrap();
    a.mul(&a).unwrap().sum(&[], false).unwrap().backward().unwrap();
    adam.step().unwrap();
    assert_close(&a.to_vec::<f32>().unwrap(), &[0.99, -1.99], 1e-6);
}

#[test]
fn optimizer_arguments_are_checked() {
    let p = param(&[1.0], &[1]);
    let e = Optimizer::sgd(&[&p], SgdOptions::new(-1.0)).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("lr"), "{}", e.message());
    assert_eq!(Optimizer::sgd(&[&p], SgdOptions::new(f64::NAN)).unwrap_err().code(), Code::InvalidArgument);
    let adam = AdamOptions { betas: (1.0, 0.999), ..AdamOptions::default() };
    assert_eq!(Optimizer::adam(&[&p], adam).unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(Optimizer::sgd(&[&p, &p], SgdOptions::new(0.1)).unwrap_err().code(), Code::InvalidArgument);
    let plain = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
    assert_eq!(Optimizer::sgd(&[&plain], SgdOptions::new(0.1)).unwrap_err().code(), Code::InvalidArgument);
    let l = p.lazy(0).unwrap();
    assert_eq!(Optimizer::sgd(&[&l], SgdOptions::new(0.1)).unwrap_err().code(), Code::InvalidArgument);
}

#[test]
fn chunked_training_equals_unsplit() {
    let _g = serial();
    // 99 samples: chunks of a power of two leave an uneven last chunk, which the mean
    // must weigh exactly.
    let (loss, mut params) = mlp_loss(99);
    let _automatic = Budget::set(0);
    let unsplit_plan = Plan::new(&loss, Mode::Training).unwrap();
    assert_eq!(unsplit_plan.num_chunks(), 1);
    let unsplit_loss = loss.item().unwrap();
    loss.backward().unwrap();
    let unsplit: Vec<Vec<f32>> = params.iter().map(grad).collect();
    for p in &mut params {
        p.zero_grad().unwrap();
    }
    assert!(params.iter().all(|p| grad(p).iter().all(|v| *v == 0.0)));

    let budget = splitting_budget(&loss);
    let guard = Budget::set(budget);
    let plan = Plan::new(&loss, Mode::Training).unwrap();
    let chunk = plan.chunk_size().unwrap();
    assert!(plan.num_chunks() > 1, "not split: {}", plan.describe().unwrap());
    assert!(chunk.count_ones() == 1 && chunk > 1 && chunk < 99, "{}", plan.describe().unwrap());
    assert!(plan.peak_bytes() <= budget);
    loss.backward().unwrap();
    let chunked_loss = loss.item().unwrap();
    drop(guard);

    assert!((chunked_loss - unsplit_loss).abs() < 1e-5, "{chunked_loss} vs {unsplit_loss}");
    for (i, (p, expected)) in params.iter().zip(&unsplit).enumerate() {
        let g = grad(p);
        assert!(expected.iter().any(|v| *v != 0.0), "parameter {i} has a zero gradient");
        assert_close(&g, expected, 1e-5);
    }
}

#[test]
fn torchscript_module() {
    let _g = serial();
    let dir = models_dir();
    let mut m = Module::load(dir.join("mlp.pt"), "cpu").unwrap();
    assert_eq!(m.num_parameters().unwrap(), 4);
    let names: Vec<String> = m.named_parameters().unwrap().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);
    let params = m.parameters().unwrap();
    assert_eq!(params[0].shape().unwrap(), vec![256, 784]);
    assert_eq!(params[3].shape().unwrap(), vec![10]);
    assert_eq!(m.parameter(4).unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(m.parameter_name(9).unwrap_err().code(), Code::InvalidArgument);

    // A lazy call: shape and batch dim at once; values against the MLP computed by hand
    // from the parameters (relu(x W1^T + b1) W2^T + b2).
    koila::manual_seed(1).unwrap();
    let x = Tensor::randn(&[3, 784], DType::Float32, "cpu").unwrap();
    let out = m.forward(&[&x.lazy(0).unwrap()]).unwrap();
    assert_eq!((out.shape().unwrap(), out.batch_dim().unwrap()), (vec![3, 10], Some(0)));
    let (xv, w1, b1, w2, b2) = (
        x.to_vec::<f32>().unwrap(),
        params[0].to_vec::<f32>().unwrap(),
        params[1].to_vec::<f32>().unwrap(),
        params[2].to_vec::<f32>().unwrap(),
        params[3].to_vec::<f32>().unwrap(),
    );
    let mut expected = Vec::new();
    for n in 0..3 {
        let h: Vec<f32> = (0..256)
            .map(|j| (b1[j] + (0..784).map(|k| xv[n * 784 + k] * w1[j * 784 + k]).sum::<f32>()).max(0.0))
            .collect();
        expected.extend((0..10).map(|o| b2[o] + (0..256).map(|j| h[j] * w2[o * 256 + j]).sum::<f32>()));
    }
    assert_close(&out.to_vec::<f32>().unwrap(), &expected, 1e-4);
    // Eager call on a concrete input: the same values.
    assert_close(&m.forward(&[&x]).unwrap().to_vec::<f32>().unwrap(), &expected, 1e-4);

    // Rejected inputs fail when the call is built, with the module's complaint.
    let bad = Tensor::zeros(&[3, 100], DType::Float32, "cpu").unwrap().lazy(0).unwrap();
    let e = m.forward(&[&bad]).unwrap_err();
    assert_eq!(e.code(), Code::Shape);
    assert!(e.message().contains("MLP"), "{}", e.message());
    assert_eq!(m.forward(&[]).unwrap_err().code(), Code::InvalidArgument);

    // Training flag.
    m.train(false).unwrap();
    assert!(!m.is_training().unwrap());
    m.train(true).unwrap();
    assert!(m.is_training().unwrap());

    // Save and load again: same parameters.
    let saved = std::env::temp_dir().join(format!("koila-rust-{}.pt", std::process::id()));
    m.save(&saved).unwrap();
    let again = Module::load(&saved, "cpu").unwrap();
    std::fs::remove_file(&saved).unwrap();
    assert_eq!(again.parameter(2).unwrap().to_vec::<f32>().unwrap(), w2);
    // Bad files.
    let e = Module::load(dir.join("no-such-model.pt"), "cpu").unwrap_err();
    assert_eq!(e.code(), Code::Io);
    assert!(e.message().contains("no-such-model.pt"), "{}", e.message());
    assert_eq!(m.save("/no/such/dir/m.pt").unwrap_err().code(), Code::Io);
    assert_eq!(Module::load(dir.join("mlp.pt"), "tpu").unwrap_err().code(), Code::Device);

    // Results outlive the module handle.
    drop(m);
    drop(again);
    assert_close(&out.to_vec::<f32>().unwrap(), &expected, 1e-4);
}

#[test]
fn training_a_module_in_chunks_equals_unsplit() {
    let _g = serial();
    let m = Module::load(models_dir().join("mlp.pt"), "cpu").unwrap();
    let params = m.parameters().unwrap();
    let mut sgd = Optimizer::sgd(&params.iter().collect::<Vec<_>>(), SgdOptions::new(0.05)).unwrap();
    koila::manual_seed(5).unwrap();
    let x = Tensor::randn(&[1000, 784], DType::Float32, "cpu").unwrap();
    let labels: Vec<i64> = (0..1000).map(|i| i % 10).collect();
    let y = Tensor::from_slice(&labels, &[1000]).unwrap();
    let loss = m
        .forward(&[&x.lazy(0).unwrap()])
        .unwrap()
        .cross_entropy(&y.lazy(0).unwrap(), Reduction::Mean)
        .unwrap();

    koila::set_memory_budget("cpu", 0).unwrap();
    sgd.zero_grad().unwrap();
    loss.backward().unwrap();
    let unsplit: Vec<Vec<f32>> = params.iter().map(grad).collect();

    sgd.zero_grad().unwrap();
    let guard = Budget::set(splitting_budget(&loss));
    let plan = Plan::new(&loss, Mode::Training).unwrap();
    assert!(plan.num_chunks() > 1, "not split: {}", plan.describe().unwrap());
    loss.backward().unwrap();
    drop(guard);
    for (p, expected) in params.iter().zip(&unsplit) {
        assert_close(&grad(p), expected, 1e-5);
    }

    // A step lowers the loss.
    let before = loss.item().unwrap();
    sgd.step().unwrap();
    let after = loss.item().unwrap();
    assert!(after < before, "{after} >= {before}");
}

#[test]
fn progress_reports_each_chunk_of_a_chunked_backward() {
    use std::sync::{Arc, Mutex};
    let _g = serial();
    let (loss, mut params) = mlp_loss(99);
    let budget = splitting_budget(&loss);
    let _guard = Budget::set(budget);
    // Other tests' runs may report on their own threads: only this thread's calls count.
    let me = std::thread::current().id();
    let seen: Arc<Mutex<Vec<(String, i64, i64)>>> = Arc::default();
    let sink = Arc::clone(&seen);
    koila::set_progress(Some(move |what: &str, done: i64, total: i64| {
        if std::thread::current().id() == me {
            sink.lock().unwrap().push((what.to_string(), done, total));
        }
    }))
    .unwrap();
    let plan = Plan::new(&loss, Mode::Training).unwrap();
    assert!(plan.num_chunks() > 1, "not split: {}", plan.describe().unwrap());
    assert!(seen.lock().unwrap().is_empty(), "planning reported progress");
    loss.backward().unwrap();
    let n = plan.num_chunks();
    let expected: Vec<(String, i64, i64)> = (1..=n).map(|d| ("backward".to_string(), d, n)).collect();
    assert_eq!(*seen.lock().unwrap(), expected);

    // A panic in the closure does not cross into C; clearing turns reports off.
    koila::set_progress(Some(|_: &str, done: i64, _: i64| {
        assert!(done != 1, "from the progress closure (expected)")
    }))
    .unwrap();
    loss.backward().unwrap();
    koila::clear_progress().unwrap();
    seen.lock().unwrap().clear();
    loss.backward().unwrap();
    assert!(seen.lock().unwrap().is_empty());
    for p in &mut params {
        p.zero_grad().unwrap();
    }
}

#[test]
fn exported_program() {
    let _g = serial();
    let dir = models_dir();
    // A torch.export program (PyTorch 2.14.1): conv, batch norm in training mode, linear.
    let mut m = Module::load(dir.join("convbn_train.pt2"), "cpu").unwrap();
    assert_eq!(m.kind().unwrap(), ModuleKind::Exported);
    assert_eq!(Module::load(dir.join("mlp.pt"), "cpu").unwrap().kind().unwrap(), ModuleKind::TorchScript);
    let names: Vec<String> = m.named_parameters().unwrap().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias"]);
    let buffers = m.named_buffers().unwrap();
    let names: Vec<&str> = buffers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]);
    assert_eq!(m.buffer(3).unwrap_err().code(), Code::InvalidArgument);
    // Its mode was fixed at export.
    assert!(m.is_training().unwrap());
    m.train(true).unwrap();
    let e = m.train(false).unwrap_err();
    assert_eq!(e.code(), Code::Unsupported);
    assert!(e.message().contains("exported in training mode"), "{}", e.message());

    // A training step: the running statistics move, seen through the buffer aliases.
    let tracked = &buffers[2].1;
    let before = tracked.to_vec::<i64>().unwrap()[0];
    koila::manual_seed(3).unwrap();
    let x = Tensor::randn(&[8, 3, 6, 6], DType::Float32, "cpu").unwrap();
    let y = Tensor::from_slice(&[0i64, 1, 2, 3, 4, 0, 1, 2], &[8]).unwrap();
    let logits = m.forward(&[&x.lazy(0).unwrap()]).unwrap();
    assert_eq!((logits.shape().unwrap(), logits.batch_dim().unwrap()), (vec![8, 5], Some(0)));
    let loss = logits.cross_entropy(&y.lazy(0).unwrap(), Reduction::Mean).unwrap();
    loss.backward().unwrap();
    assert_eq!(tracked.to_vec::<i64>().unwrap()[0], before + 1);
    for p in m.parameters().unwrap() {
        assert!(p.grad().unwrap().is_some());
    }
    // Its static sizes are checked when the call is built.
    let wrong = Tensor::zeros(&[8, 3, 7, 7], DType::Float32, "cpu").unwrap().lazy(0).unwrap();
    assert_eq!(m.forward(&[&wrong]).unwrap_err().code(), Code::Shape);
}

#[test]
fn several_results() {
    let _g = serial();
    let dir = models_dir();
    // nn.LSTM's whole return, (output, (h, c)), exported by PyTorch 2.14.1: h and c carry
    // the batch in dim 1.
    let m = Module::load(dir.join("lstm_full.pt2"), "cpu").unwrap();
    koila::manual_seed(4).unwrap();
    let x = Tensor::randn(&[8, 5, 4], DType::Float32, "cpu").unwrap().lazy(0).unwrap();
    let results = m.forward_all(&[&x]).unwrap();
    let results: Vec<Tensor> = results.into_iter().map(|r| r.expect("a tensor")).collect();
    let shapes: Vec<(Vec<i64>, Option<i64>)> =
        results.iter().map(|r| (r.shape().unwrap(), r.batch_dim().unwrap())).collect();
    assert_eq!(shapes, [(vec![8, 5, 6], Some(0)), (vec![2, 8, 6], Some(1)), (vec![2, 8, 6], Some(1))]);
    // A loss over all three trains every parameter.
    let mut loss: Option<Tensor> = None;
    for r in &results {
        let term = r.mul(r).unwrap().mean(&[], false).unwrap();
        loss = Some(match loss {
            Some(l) => l.add(&term).unwrap(),
            None => term,
        });
    }
    loss.unwrap().backward().unwrap();
    for p in m.parameters().unwrap() {
        assert!(p.grad().unwrap().is_some());
    }
    // The last step's h is the output's last step (one layer on top: layer 1 of h).
    let out = results[0].to_vec::<f32>().unwrap();
    let h = results[1].to_vec::<f32>().unwrap();
    for sample in 0..8 {
        let last = &out[(sample * 5 + 4) * 6..(sample * 5 + 5) * 6];
        let top = &h[(8 + sample) * 6..(8 + sample + 1) * 6];
        assert_close(last, top, 1e-6);
    }
    // A module with one result gives one.
    let mlp = Module::load(dir.join("mlp.pt"), "cpu").unwrap();
    let xs = Tensor::randn(&[4, 784], DType::Float32, "cpu").unwrap();
    assert_eq!(mlp.forward_all(&[&xs]).unwrap().len(), 1);
}
