//! Shared by the integration tests.
#![allow(dead_code)]
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use koila::{DType, Reduction, Tensor};

/// Tests that change or measure process-wide state (the memory budget, the random seed,
/// bytes in use) hold this lock, so `cargo test`'s parallel threads cannot disturb them.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The TorchScript models the C++ build writes (`koila_test_models`): KOILA_TEST_MODELS,
/// else the checkout's build/tests/models.
pub fn models_dir() -> PathBuf {
    let dir = std::env::var_os("KOILA_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../build/tests/models"));
    assert!(
        dir.join("mlp.pt").exists(),
        "no mlp.pt in {} (build koila with scripts/build.sh, or set KOILA_TEST_MODELS)",
        dir.display()
    );
    dir
}

pub fn assert_close(actual: &[f32], expected: &[f32], tol: f32) {
    assert_eq!(actual.len(), expected.len(), "lengths differ: {actual:?} vs {expected:?}");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= tol * (1.0 + e.abs()),
            "element {i} of {}: {a} vs expected {e} (tolerance {tol})",
            actual.len()
        );
    }
}

/// Sets a CPU memory budget and restores the automatic one when dropped (also when the
/// test fails), so a failure cannot leave later tests under a tiny budget.
pub struct Budget;

impl Budget {
    pub fn set(bytes: u64) -> Budget {
        koila::set_memory_budget("cpu", bytes).unwrap();
        Budget
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        let _ = koila::set_memory_budget("cpu", 0);
    }
}

/// The largest budget (in steps of a twentieth of what the unsplit run adds) under which
/// a backward from `loss` runs in more than one chunk.
pub fn splitting_budget(loss: &koila::Tensor) -> u64 {
    use koila::{Mode, Plan};
    koila::set_memory_budget("cpu", 0).unwrap();
    let full = Plan::new(loss, Mode::Training).unwrap().full_peak_bytes();
    let current = koila::memory_stats("cpu").unwrap().current;
    assert!(full > current, "full peak {full} <= current {current}");
    for twentieths in (1..20).rev() {
        let budget = current + (full - current) * twentieths / 20;
        koila::set_memory_budget("cpu", budget).unwrap();
        let plan = Plan::new(loss, Mode::Training);
        koila::set_memory_budget("cpu", 0).unwrap();
        if let Ok(plan) = plan {
            if plan.num_chunks() > 1 {
                return budget;
            }
        }
    }
    koila::set_memory_budget("cpu", current + (full - current) / 2).unwrap();
    let why = Plan::new(loss, Mode::Training).map(|p| p.describe().unwrap()).unwrap_or_else(|e| e.message().to_string());
    koila::set_memory_budget("cpu", 0).unwrap();
    panic!("no budget between {current} and {full} bytes splits the batch; halfway: {why}");
}

/// A lazy batch of `batch` random samples through Linear(64, 256), tanh, Linear(256, 10)
/// and a mean cross-entropy (seeded, so the same each call); returns the loss and the
/// parameters.
pub fn mlp_loss(batch: i64) -> (Tensor, Vec<Tensor>) {
    koila::manual_seed(3).unwrap();
    let x = Tensor::randn(&[batch, 64], DType::Float32, "cpu").unwrap();
    let labels: Vec<i64> = (0..batch).map(|i| (i * 7) % 10).collect();
    let y = Tensor::from_slice(&labels, &[batch]).unwrap();
    let mk = |shape: &[i64]| {
        let mut p = Tensor::randn(shape, DType::Float32, "cpu").unwrap().mul_scalar(0.1).unwrap();
        p.set_requires_grad(true).unwrap();
        p
    };
    let params = vec![mk(&[256, 64]), mk(&[256]), mk(&[10, 256]), mk(&[10])];
    let loss = x
        .lazy(0)
        .unwrap()
        .linear(&params[0], Some(&params[1]))
        .unwrap()
        .tanh()
        .unwrap()
        .linear(&params[2], Some(&params[3]))
        .unwrap()
        .cross_entropy(&y.lazy(0).unwrap(), Reduction::Mean)
        .unwrap();
    (loss, params)
}
