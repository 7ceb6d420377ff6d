//! Chunking options: set_batch_stats (batch norm in training, exact or per chunk) and
//! set_chunking. They are process-wide, so they live in this test binary of their own (no
//! other suite's test runs in this process while one is set), every test here holds
//! `serial()`, and a guard restores the defaults even when a test fails.
mod common;

use common::{assert_close, mlp_loss, serial, splitting_budget, Budget};
use koila::{BatchStats, Chunking, Code, DType, Mode, Plan, Reduction, Tensor};

/// Sets chunking options; restores the defaults when dropped (also when the test fails).
struct Options;

impl Options {
    fn set(stats: BatchStats, chunking: Chunking) -> Options {
        koila::set_batch_stats(stats).unwrap();
        koila::set_chunking(chunking).unwrap();
        Options
    }
}

impl Drop for Options {
    fn drop(&mut self) {
        let _ = koila::set_batch_stats(BatchStats::default());
        let _ = koila::set_chunking(Chunking::default());
    }
}

fn param(shape: &[i64]) -> Tensor {
    let mut p = Tensor::randn(shape, DType::Float32, "cpu").unwrap().mul_scalar(0.1).unwrap();
    p.set_requires_grad(true).unwrap();
    p
}

/// Linear(32, HIDDEN), BatchNorm1d(HIDDEN) in training (running statistics from zeros and
/// ones), ReLU, Linear(HIDDEN, 10), mean cross-entropy, over a lazy batch of `batch`.
/// Wide and thin, so that activations, not parameters, dominate even for 64 samples.
struct BatchNormNet {
    x: Tensor,
    params: Vec<Tensor>,
    running_mean: Tensor,
    running_var: Tensor,
    loss: Tensor,
}

const MOMENTUM: f64 = 0.1;
const HIDDEN: i64 = 1024;

impl BatchNormNet {
    fn new(seed: u64, batch: i64) -> BatchNormNet {
        koila::manual_seed(seed).unwrap();
        let x = Tensor::randn(&[batch, 32], DType::Float32, "cpu").unwrap();
        let labels: Vec<i64> = (0..batch).map(|i| (i * 3) % 10).collect();
        let y = Tensor::from_slice(&labels, &[batch]).unwrap();
        let params = vec![param(&[HIDDEN, 32]), param(&[HIDDEN]), param(&[HIDDEN]), param(&[HIDDEN]), param(&[10, HIDDEN])];
        let running_mean = Tensor::zeros(&[HIDDEN], DType::Float32, "cpu").unwrap();
        let running_var = Tensor::ones(&[HIDDEN], DType::Float32, "cpu").unwrap();
        let loss = x
            .lazy(0)
            .unwrap()
            .linear(&params[0], Some(&params[1]))
            .unwrap()
            .batch_norm(Some(&params[2]), Some(&params[3]), Some(&running_mean), Some(&running_var), true, MOMENTUM, 1e-5)
            .unwrap()
            .relu()
            .unwrap()
            .linear(&params[4], None)
            .unwrap()
            .cross_entropy(&y.lazy(0).unwrap(), Reduction::Mean)
            .unwrap();
        BatchNormNet { x, params, running_mean, running_var, loss }
    }

    /// The running statistics one update with the whole batch leaves, from zeros and ones:
    /// momentum times the batch's mean, and 1 - momentum + momentum times its unbiased
    /// variance, of the first linear layer's output (computed eagerly).
    fn expected_running_stats(&self) -> (Vec<f32>, Vec<f32>) {
        let h = self.x.linear(&self.params[0], Some(&self.params[1])).unwrap();
        let n = h.shape().unwrap()[0] as f64;
        let mean = h.mean(&[0], true).unwrap();
        let centered = h.sub(&mean).unwrap();
        let var = centered.mul(&centered).unwrap().sum(&[0], false).unwrap().div_scalar(n - 1.0).unwrap();
        let mean = mean.mul_scalar(MOMENTUM).unwrap().to_vec::<f32>().unwrap();
        let var = var.mul_scalar(MOMENTUM).unwrap().add_scalar(1.0 - MOMENTUM).unwrap().to_vec::<f32>().unwrap();
        (mean, var)
    }

    fn gradients(&self) -> Vec<Option<Vec<f32>>> {
        self.params.iter().map(|p| p.grad().unwrap().map(|g| g.to_vec::<f32>().unwrap())).collect()
    }
}

#[test]
fn the_setters_take_every_value_and_c_rejects_unknown_ones() {
    let _g = serial();
    let _o = Options::set(BatchStats::PerChunk, Chunking::Fastest);
    koila::set_batch_stats(BatchStats::Exact).unwrap();
    koila::set_chunking(Chunking::Largest).unwrap();
    assert_eq!(BatchStats::default(), BatchStats::Exact);
    assert_eq!(Chunking::default(), Chunking::Largest);
    // The Rust enums cannot hold an unknown value; the C functions refuse one.
    for raw in [2, 7, u32::MAX] {
        let status = unsafe { koila::sys::koila_set_batch_stats(raw) };
        assert!(!status.is_null(), "koila_set_batch_stats({raw}) succeeded");
        assert_eq!(unsafe { koila::sys::koila_status_code(status) }, koila::sys::KOILA_ERROR_INVALID_ARGUMENT);
        unsafe { koila::sys::koila_status_free(status) };
        let status = unsafe { koila::sys::koila_set_chunking(raw) };
        assert!(!status.is_null(), "koila_set_chunking({raw}) succeeded");
        assert_eq!(unsafe { koila::sys::koila_status_code(status) }, koila::sys::KOILA_ERROR_INVALID_ARGUMENT);
        unsafe { koila::sys::koila_status_free(status) };
    }
}

#[test]
fn batch_norm_in_training_splits_only_with_statistics_per_chunk() {
    let _g = serial();
    let _o = Options::set(BatchStats::Exact, Chunking::Largest);
    let net = BatchNormNet::new(11, 64);

    // Unsplit under the automatic budget.
    let plan = Plan::new(&net.loss, Mode::Training).unwrap();
    assert_eq!(plan.num_chunks(), 1, "{}", plan.describe().unwrap());

    // A budget under which the batch splits (found with statistics per chunk).
    koila::set_batch_stats(BatchStats::PerChunk).unwrap();
    let _budget = Budget::set(splitting_budget(&net.loss));

    // EXACT: batch norm couples the batch; the error names the option.
    koila::set_batch_stats(BatchStats::Exact).unwrap();
    let err = Plan::new(&net.loss, Mode::Training).expect_err("EXACT planned a split batch norm");
    assert_eq!(err.code(), Code::NotSplittable, "{}", err.message());
    assert!(err.message().contains("koila_set_batch_stats(KOILA_BATCH_STATS_PER_CHUNK)"), "{}", err.message());
    let err = net.loss.backward().unwrap_err();
    assert_eq!(err.code(), Code::NotSplittable, "{}", err.message());
    assert!(net.gradients().iter().all(Option::is_none), "a refused backward left gradients");
    assert_eq!(net.running_mean.to_vec::<f32>().unwrap(), vec![0.0; HIDDEN as usize], "a refused backward moved running_mean");

    // PER_CHUNK: the same graph plans split and says so; the backward runs.
    koila::set_batch_stats(BatchStats::PerChunk).unwrap();
    let plan = Plan::new(&net.loss, Mode::Training).unwrap();
    let text = plan.describe().unwrap();
    assert!(plan.num_chunks() > 1, "not split: {text}");
    assert!(text.contains("Batch statistics: per chunk"), "{text}");
    net.loss.backward().unwrap();
    for (k, g) in net.gradients().into_iter().enumerate() {
        let g = g.unwrap_or_else(|| panic!("parameter {k} has no gradient"));
        assert!(g.iter().all(|v| v.is_finite()), "parameter {k}: {g:?}");
        assert!(g.iter().any(|&v| v != 0.0), "parameter {k}: all zero");
    }
    // One update of the running statistics, with the whole batch's, as an unsplit run makes.
    let (mean, var) = net.expected_running_stats();
    assert_close(&net.running_mean.to_vec::<f32>().unwrap(), &mean, 1e-4);
    assert_close(&net.running_var.to_vec::<f32>().unwrap(), &var, 1e-4);
}

#[test]
fn statistics_per_chunk_leave_an_unsplit_run_unchanged() {
    let _g = serial();
    let _o = Options::set(BatchStats::Exact, Chunking::Largest);
    let exact = BatchNormNet::new(12, 64);
    let exact_loss = exact.loss.item().unwrap();
    exact.loss.backward().unwrap();

    koila::set_batch_stats(BatchStats::PerChunk).unwrap();
    let per_chunk = BatchNormNet::new(12, 64);
    let plan = Plan::new(&per_chunk.loss, Mode::Training).unwrap();
    assert_eq!(plan.num_chunks(), 1, "{}", plan.describe().unwrap());
    assert_eq!(per_chunk.loss.item().unwrap(), exact_loss);
    per_chunk.loss.backward().unwrap();
    assert_eq!(per_chunk.gradients(), exact.gradients());
    // Two evaluations each (item, backward): two updates each, the same.
    assert_eq!(per_chunk.running_mean.to_vec::<f32>().unwrap(), exact.running_mean.to_vec::<f32>().unwrap());
    assert_eq!(per_chunk.running_var.to_vec::<f32>().unwrap(), exact.running_var.to_vec::<f32>().unwrap());
}

#[test]
fn fastest_chunking_gives_the_same_results() {
    let _g = serial();
    let _o = Options::set(BatchStats::Exact, Chunking::Largest);
    let (loss, mut params) = mlp_loss(200);
    let expected_loss = loss.item().unwrap();
    loss.backward().unwrap();
    let expected: Vec<Vec<f32>> = params.iter().map(|p| p.grad().unwrap().unwrap().to_vec().unwrap()).collect();

    koila::set_chunking(Chunking::Fastest).unwrap();
    // Unsplit and under a budget that splits; several runs, as the candidates are timed.
    for budget in [0, splitting_budget(&loss)] {
        let _budget = Budget::set(budget);
        for _ in 0..3 {
            let plan = Plan::new(&loss, Mode::Training).unwrap();
            assert!(plan.peak_bytes() <= plan.budget_bytes(), "{}", plan.describe().unwrap());
            for p in &mut params {
                p.zero_grad().unwrap();
            }
            let value = loss.item().unwrap();
            assert!((value - expected_loss).abs() <= 1e-5 * expected_loss.abs(), "{value} vs {expected_loss}");
            loss.backward().unwrap();
            for (p, e) in params.iter().zip(&expected) {
                assert_close(&p.grad().unwrap().unwrap().to_vec::<f32>().unwrap(), e, 1e-5);
            }
        }
    }
}
