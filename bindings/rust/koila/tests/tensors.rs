//! Making tensors, metadata, reading values, errors, text: the binding layer against hand
//! computation.
mod common;

use common::{assert_close, serial};
use koila::{Code, DType, Mode, Plan, Tensor};

fn t(data: &[f32], shape: &[i64]) -> Tensor {
    Tensor::from_slice(data, shape).unwrap()
}

#[test]
fn version_is_the_headers() {
    let _g = serial(); // memory figures are process-wide
    let v = koila::version();
    let sys = format!("{}.{}.{}", koila::sys::KOILA_VERSION_MAJOR, koila::sys::KOILA_VERSION_MINOR, koila::sys::KOILA_VERSION_PATCH);
    assert_eq!(v, sys);
    assert_eq!(v, env!("CARGO_PKG_VERSION"));
}

#[test]
fn every_element_type_round_trips() {
    let _g = serial(); // memory figures are process-wide
    fn round<T: koila::Element + PartialEq + std::fmt::Debug>(data: &[T], shape: &[i64]) {
        let x = Tensor::from_slice(data, shape).unwrap();
        assert_eq!(x.dtype().unwrap(), T::DTYPE);
        assert_eq!(x.shape().unwrap(), shape);
        assert_eq!(x.to_vec::<T>().unwrap(), data);
        // Through a lazy wrapper too.
        assert_eq!(x.lazy(0).unwrap().to_vec::<T>().unwrap(), data);
    }
    round(&[1.5f32, -2.0, 3.25, 0.0, 1e-3, 7.0], &[2, 3]);
    round(&[1.5f64, -2.0, 1e300], &[3]);
    round(&[i64::MIN, -1, 0, i64::MAX], &[2, 2]);
    round(&[i32::MIN, 5, i32::MAX], &[3, 1]);
    round(&[-128i8, 0, 127], &[3]);
    round(&[0u8, 128, 255], &[3]);
    round(&[true, false, true, true], &[4]);
    // Half precision as raw bytes: 1.0 = 0x3c00, -2.0 = 0xc000 (IEEE), 1.0 = 0x3f80 (bf16).
    let half = Tensor::from_bytes(&[0x00, 0x3c, 0x00, 0xc0], DType::Float16, &[2], "cpu").unwrap();
    assert_eq!(half.dtype().unwrap(), DType::Float16);
    assert_eq!(half.to_bytes().unwrap(), vec![0x00, 0x3c, 0x00, 0xc0]);
    assert_eq!(half.sum(&[], false).unwrap().item().unwrap(), -1.0);
    let bf = Tensor::from_bytes(&[0x80, 0x3f], DType::BFloat16, &[1], "cpu").unwrap();
    assert_eq!(bf.item().unwrap(), 1.0);
}

#[test]
fn scalars_and_empty_tensors() {
    let _g = serial(); // memory figures are process-wide
    let s = Tensor::from_slice(&[2.5f64], &[]).unwrap();
    assert_eq!(s.shape().unwrap(), Vec::<i64>::new());
    assert_eq!(s.item().unwrap(), 2.5);
    let e = Tensor::from_slice::<f32>(&[], &[0, 3]).unwrap();
    assert_eq!(e.shape().unwrap(), vec![0, 3]);
    assert_eq!(e.to_vec::<f32>().unwrap(), Vec::<f32>::new());
}

#[test]
fn factories_and_seed() {
    let _g = serial();
    let z = Tensor::zeros(&[2, 3], DType::Float64, "cpu").unwrap();
    assert_eq!(z.to_vec::<f64>().unwrap(), vec![0.0; 6]);
    let o = Tensor::ones(&[4], DType::Int32, "cpu").unwrap();
    assert_eq!(o.to_vec::<i32>().unwrap(), vec![1; 4]);
    koila::manual_seed(7).unwrap();
    let a = Tensor::randn(&[1000], DType::Float32, "cpu").unwrap().to_vec::<f32>().unwrap();
    koila::manual_seed(7).unwrap();
    let b = Tensor::randn(&[1000], DType::Float32, "cpu").unwrap().to_vec::<f32>().unwrap();
    assert_eq!(a, b);
    let mean = a.iter().sum::<f32>() / 1000.0;
    let var = a.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / 999.0;
    assert!(mean.abs() < 0.15 && (var - 1.0).abs() < 0.2, "not standard normal: mean {mean}, var {var}");
    let err = Tensor::randn(&[2], DType::Int64, "cpu").unwrap_err();
    assert_eq!(err.code(), Code::DType);
}

#[test]
fn lazy_metadata_follows_the_batch() {
    let _g = serial(); // memory figures are process-wide
    let x = Tensor::zeros(&[6, 4, 5], DType::Float32, "cpu").unwrap();
    assert!(!x.is_lazy().unwrap());
    assert_eq!(x.batch_dim().unwrap(), None);
    let lx = x.lazy(0).unwrap();
    assert!(lx.is_lazy().unwrap());
    assert_eq!(lx.batch_dim().unwrap(), Some(0));
    let y = lx.permute(&[2, 0, 1]).unwrap().relu().unwrap();
    assert_eq!(y.shape().unwrap(), vec![5, 6, 4]);
    assert_eq!(y.batch_dim().unwrap(), Some(1));
    let r = lx.reshape(&[6, 20]).unwrap().sum(&[1], false).unwrap();
    assert_eq!((r.shape().unwrap(), r.batch_dim().unwrap()), (vec![6], Some(0)));
    assert_eq!(x.lazy(-1).unwrap().batch_dim().unwrap(), Some(2));
    let u = x.lazy_unbatched().unwrap();
    assert!(u.is_lazy().unwrap());
    assert_eq!(u.batch_dim().unwrap(), None);
    let c = lx.to_vec::<f32>().unwrap();
    assert_eq!(c.len(), 120);
    assert_eq!(format!("{lx:?}"), "Tensor { shape: [6, 4, 5], dtype: Float32, lazy: true, batch_dim: Some(0) }");
}

#[test]
fn eval_makes_a_concrete_tensor() {
    let _g = serial(); // memory figures are process-wide
    let x = t(&[1.0, -2.0, 3.0], &[3]).lazy(0).unwrap().abs().unwrap();
    let e = x.eval().unwrap();
    assert!(!e.is_lazy().unwrap());
    assert_eq!(e.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn errors_carry_code_and_message() {
    let _g = serial(); // memory figures are process-wide
    let a = t(&[0.0; 6], &[2, 3]);
    let b = t(&[0.0; 4], &[4]);
    let e = a.add(&b).unwrap_err();
    assert_eq!(e.code(), Code::Shape);
    assert!(e.message().contains("[2, 3]") && e.message().contains("[4]"), "{}", e.message());
    assert!(e.to_string().starts_with("koila error (Shape): "), "{e}");
    // The same through a lazy graph: reported when the op is built.
    assert_eq!(a.lazy(0).unwrap().add(&b).unwrap_err().code(), Code::Shape);

    // Data that does not fill the shape.
    assert_eq!(Tensor::from_slice(&[1.0f32, 2.0], &[3]).unwrap_err().code(), Code::InvalidArgument);
    // Devices.
    assert_eq!(Tensor::zeros(&[1], DType::Float32, "tpu").unwrap_err().code(), Code::Device);
    let nul = Tensor::zeros(&[1], DType::Float32, "cp\0u").unwrap_err();
    assert_eq!(nul.code(), Code::InvalidArgument);
    assert!(nul.message().contains("NUL"), "{}", nul.message());
    // Reads of the wrong element type.
    let d = a.to_vec::<f64>().unwrap_err();
    assert_eq!(d.code(), Code::DType);
    assert!(d.message().contains("Float32") && d.message().contains("f64"), "{}", d.message());
    // item of many elements, bad dims, bad reshape.
    assert_eq!(a.item().unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(a.softmax(5).unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(a.reshape(&[4, 2]).unwrap_err().code(), Code::Shape);
    assert_eq!(Tensor::cat(&[], 0).unwrap_err().code(), Code::InvalidArgument);
    // Lazy tensors take no requires_grad; gradients flow to their concrete leaves.
    let mut l = a.lazy(0).unwrap();
    assert_eq!(l.set_requires_grad(true).unwrap_err().code(), Code::InvalidArgument);
    // A lazy batch dim out of range.
    assert_eq!(a.lazy(2).unwrap_err().code(), Code::InvalidArgument);
}

#[test]
fn text_out() {
    let _g = serial(); // memory figures are process-wide
    let x = t(&[1.5, -2.0], &[2]);
    let text = x.to_text().unwrap();
    assert!(text.contains("1.5") && text.contains("-2"), "{text}");
    assert_eq!(format!("{x}"), text);
    // Long texts grow the buffer.
    let big = Tensor::ones(&[40, 40], DType::Float64, "cpu").unwrap().lazy(0).unwrap();
    assert!(big.to_text().unwrap().len() > 1000);
}

#[test]
fn plans_and_budgets() {
    let _g = serial();
    koila::set_memory_budget("cpu", 0).unwrap();
    let x = Tensor::randn(&[64, 16], DType::Float32, "cpu").unwrap();
    let s = x.lazy(0).unwrap().sum(&[], false).unwrap();
    let plan = Plan::new(&s, Mode::Forward).unwrap();
    assert_eq!(plan.batch_size(), Some(64));
    assert_eq!(plan.chunk_size(), Some(64));
    assert_eq!(plan.num_chunks(), 1);
    assert!(plan.peak_bytes() >= plan.full_peak_bytes().min(plan.peak_bytes()));
    assert!(plan.full_peak_bytes() > 0 && plan.budget_bytes() > plan.peak_bytes());
    let text = plan.describe().unwrap();
    assert!(text.contains("batch 64"), "{text}");
    assert_eq!(format!("{plan}"), text);
    // The need: the estimate with koila's margin, within the budget since it runs unsplit.
    assert!(plan.needed_bytes() > plan.peak_bytes() && plan.needed_bytes() <= plan.budget_bytes());
    assert_eq!(plan.full_needed_bytes(), plan.needed_bytes());
    assert!(text.contains("koila's margin of 10%"), "{text}");
    // A concrete tensor has no batch.
    let c = Plan::new(&x, Mode::Forward).unwrap();
    assert_eq!((c.batch_size(), c.chunk_size(), c.num_chunks()), (None, None, 1));

    // Budgets: set, read back, too small to run anything.
    koila::set_memory_budget("cpu", 123_456_789).unwrap();
    assert_eq!(koila::memory_budget("cpu").unwrap(), 123_456_789);
    koila::set_memory_budget("cpu", 1).unwrap();
    let e = Plan::new(&s, Mode::Forward).unwrap_err();
    assert_eq!(e.code(), Code::OutOfMemory);
    assert_eq!(s.item().unwrap_err().code(), Code::OutOfMemory);
    koila::set_memory_budget("cpu", 0).unwrap();
    assert!(koila::memory_budget("cpu").unwrap() > 1 << 20);
    assert!((s.item().unwrap() - x.to_vec::<f32>().unwrap().iter().map(|&v| v as f64).sum::<f64>()).abs() < 1e-3);
    assert_eq!(koila::set_memory_budget("tpu", 0).unwrap_err().code(), Code::Device);
}

#[test]
fn memory_stats_count_tensors() {
    let _g = serial();
    let before = koila::memory_stats("cpu").unwrap();
    let big = Tensor::zeros(&[1024, 1024], DType::Float32, "cpu").unwrap();
    let during = koila::memory_stats("cpu").unwrap();
    assert!(during.current >= before.current + 4 * 1024 * 1024, "{before:?} -> {during:?}");
    assert!(during.peak >= during.current);
    drop(big);
    koila::memory_reset_peak("cpu").unwrap();
    let after = koila::memory_stats("cpu").unwrap();
    assert!(after.current < during.current && after.peak < during.current, "{during:?} -> {after:?}");
    assert_eq!(koila::memory_stats("gpu").unwrap_err().code(), Code::Device);
}

#[test]
fn handles_are_send_not_sync() {
    let _g = serial(); // memory figures are process-wide
    fn send<T: Send>() {}
    send::<Tensor>();
    send::<koila::Plan>();
    send::<koila::Module>();
    send::<koila::Optimizer>();
    // Compiles only while Tensor is not Sync: with Sync both impls apply and the call
    // below would be ambiguous.
    trait AmbiguousIfSync<A> {
        fn check() {}
    }
    impl<T: ?Sized> AmbiguousIfSync<()> for T {}
    impl<T: ?Sized + Sync> AmbiguousIfSync<u8> for T {}
    <Tensor as AmbiguousIfSync<_>>::check();
    <koila::Plan as AmbiguousIfSync<_>>::check();
    <koila::Module as AmbiguousIfSync<_>>::check();
    <koila::Optimizer as AmbiguousIfSync<_>>::check();

    // A lazy tensor moved to another thread evaluates there.
    let x = t(&[1.0, 2.0, 3.0], &[3]).lazy(0).unwrap().mul_scalar(2.0).unwrap();
    let v = std::thread::spawn(move || x.to_vec::<f32>().unwrap()).join().unwrap();
    assert_close(&v, &[2.0, 4.0, 6.0], 0.0);
}

#[test]
fn shallow_clones_share() {
    let _g = serial(); // memory figures are process-wide
    let mut p = Tensor::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    p.set_requires_grad(true).unwrap();
    let q = p.shallow_clone().unwrap();
    assert!(!q.is_lazy().unwrap());
    // The same leaf: a gradient through one handle is seen through the other.
    p.mul_scalar(3.0).unwrap().sum(&[], false).unwrap().backward().unwrap();
    assert_eq!(q.grad().unwrap().unwrap().to_vec::<f32>().unwrap(), vec![3.0, 3.0]);
    drop(p);
    assert_eq!(q.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);

    let x = Tensor::zeros(&[4, 3], DType::Float32, "cpu").unwrap();
    let l = x.lazy(1).unwrap().add_scalar(1.0).unwrap();
    let m = l.shallow_clone().unwrap();
    assert_eq!((m.is_lazy().unwrap(), m.batch_dim().unwrap(), m.shape().unwrap()), (true, Some(1), vec![4, 3]));
    drop(l);
    assert_eq!(m.to_vec::<f32>().unwrap(), vec![1.0; 12]);
    let u = x.lazy_unbatched().unwrap().shallow_clone().unwrap();
    assert_eq!((u.is_lazy().unwrap(), u.batch_dim().unwrap()), (true, None));
}

#[test]
fn raw_handles_round_trip() {
    let _g = serial(); // memory figures are process-wide
    let x = t(&[4.0], &[1]);
    let raw = x.into_raw();
    let back = unsafe { Tensor::from_raw(raw) }.unwrap();
    assert_eq!(back.item().unwrap(), 4.0);
    assert!(unsafe { Tensor::from_raw(std::ptr::null_mut()) }.is_none());
}
