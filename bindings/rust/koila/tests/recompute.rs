//! Recomputation (set_recompute, Plan::recomputed_bytes): a backward whose one sample does not
//! fit trains recomputing, within the budget, with the gradients of the run without it; off, it
//! is refused as before. Process-wide, so in a test binary of its own, each test holding
//! `serial()` and a guard restoring the default.
mod common;

use common::{serial, Budget};
use koila::{Code, DType, Mode, Plan, Recompute, Tensor};

/// Sets the policy; restores the default when dropped (also when the test fails).
struct Policy;

impl Policy {
    fn set(policy: Recompute) -> Policy {
        koila::set_recompute(policy).unwrap();
        Policy
    }
}

impl Drop for Policy {
    fn drop(&mut self) {
        let _ = koila::set_recompute(Recompute::default());
    }
}

/// One long sequence [1, 512, 64] through 12 x (Linear(64, 64), gelu), then the mean of squares.
fn deep_mlp() -> (Tensor, Vec<Tensor>) {
    koila::manual_seed(11).unwrap();
    let x = Tensor::randn(&[1, 512, 64], DType::Float32, "cpu").unwrap();
    let mut params = Vec::new();
    let mut h = x.lazy(0).unwrap();
    for _ in 0..12 {
        let mut w = Tensor::randn(&[64, 64], DType::Float32, "cpu").unwrap().mul_scalar(0.125).unwrap();
        let mut b = Tensor::randn(&[64], DType::Float32, "cpu").unwrap().mul_scalar(0.1).unwrap();
        w.set_requires_grad(true).unwrap();
        b.set_requires_grad(true).unwrap();
        h = h.linear(&w, Some(&b)).unwrap().gelu().unwrap();
        params.push(w);
        params.push(b);
    }
    let loss = h.mul(&h).unwrap().mean(&[], false).unwrap();
    (loss, params)
}

fn grads(params: &[Tensor]) -> Vec<Vec<f32>> {
    params.iter().map(|p| p.grad().unwrap().expect("a gradient").to_vec::<f32>().unwrap()).collect()
}

#[test]
fn a_sample_that_does_not_fit_trains_recomputing_with_the_same_gradients() {
    let _serial = serial();
    let _policy = Policy::set(Recompute::Off);
    let (loss, params) = deep_mlp();
    loss.backward().unwrap();
    let plain = grads(&params);
    let (loss, params) = deep_mlp(); // (fresh parameters: no .grad)

    let current = koila::memory_stats("cpu").unwrap().current;
    let one_sample = Plan::new(&loss, Mode::Training).unwrap().peak_bytes() - current;
    let budget = current + one_sample / 2;
    let _budget = Budget::set(budget);
    let refused = Plan::new(&loss, Mode::Training).unwrap_err();
    assert_eq!(refused.code(), Code::OutOfMemory, "{}", refused.message());
    assert!(refused.message().contains("KOILA_RECOMPUTE_OFF"), "{}", refused.message());

    koila::set_recompute(Recompute::AsNeeded).unwrap();
    let plan = Plan::new(&loss, Mode::Training).unwrap();
    assert!(plan.recomputed_bytes() > 0, "{}", plan.describe().unwrap());
    assert!(plan.describe().unwrap().contains("Recomputed:"));
    koila::memory_reset_peak("cpu").unwrap();
    loss.backward().unwrap();
    assert!(koila::memory_stats("cpu").unwrap().peak <= budget, "the run went over the budget");
    assert_eq!(grads(&params), plain, "recomputing changed the gradients");
}

#[test]
fn a_plan_that_fits_recomputes_nothing_and_a_bad_policy_is_refused() {
    let _serial = serial();
    let _policy = Policy::set(Recompute::AsNeeded);
    let (loss, _params) = deep_mlp();
    assert_eq!(Plan::new(&loss, Mode::Training).unwrap().recomputed_bytes(), 0);
    for policy in [Recompute::Off, Recompute::AsNeeded, Recompute::Preferred] {
        koila::set_recompute(policy).unwrap();
    }
}
