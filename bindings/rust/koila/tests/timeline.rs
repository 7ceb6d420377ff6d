//! koila_plan_timeline through the safe crate: the parts of a timeline add up to its
//! plan's estimate, and its events run forward then backward.
mod common;

use common::{mlp_loss, serial, splitting_budget};
use koila::{MemoryPart, Mode, Phase, Plan};

#[test]
fn a_timeline_accounts_for_its_plans_peak() {
    let _g = serial();
    let (loss, _params) = mlp_loss(512);
    let budget = splitting_budget(&loss);
    koila::set_memory_budget("cpu", budget).unwrap();
    let plan = Plan::new(&loss, Mode::Training).unwrap();
    assert!(plan.num_chunks() > 1, "{}", plan.describe().unwrap());
    for (unsplit, estimate) in [(false, plan.peak_bytes()), (true, plan.full_peak_bytes())] {
        let t = plan.timeline(unsplit).unwrap();
        let events = t.events().unwrap();
        assert!(!t.is_empty().unwrap());
        assert_eq!(events.len(), t.len().unwrap());
        let parts = [MemoryPart::InUse, MemoryPart::Activations, MemoryPart::Gradients, MemoryPart::Temporaries,
                     MemoryPart::BeyondSimulation];
        let total: u64 = parts.iter().map(|&p| t.part(p).unwrap()).sum();
        assert_eq!(total, estimate, "unsplit {unsplit}");
        let top = events.iter().map(|e| e.peak_bytes).max().unwrap();
        assert_eq!(events[t.peak_index().unwrap()].peak_bytes, top);
        assert_eq!(events[0].phase, Phase::Forward);
        assert!(events.iter().any(|e| e.phase == Phase::Backward && e.op == "FusedLinearWithBiasBackward"), "{events:?}");
        assert!(events.iter().all(|e| e.live_bytes <= e.peak_bytes));
        assert_eq!(events.iter().map(|e| e.chunk).max().unwrap(), if unsplit { 0 } else { 1 });
    }
    assert!(t_err(&plan).is_none());
    koila::set_memory_budget("cpu", 0).unwrap();
}

// An event past the end is refused with a status, not a crash.
fn t_err(plan: &Plan) -> Option<String> {
    let t = plan.timeline(true).unwrap();
    let n = t.len().unwrap();
    match t.event(n) {
        Err(e) if e.code() == koila::Code::InvalidArgument => None,
        other => Some(format!("{other:?}")),
    }
}
