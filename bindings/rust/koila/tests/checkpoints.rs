//! Checkpoints and exchanging tensors: AdamW by hand, the learning rate, optimizer state files
//! that resume a run bit for bit, gradient clipping, and DLPack both ways (tensors koila
//! exports, and structs built here over a Vec, with their deleters counted).
mod common;

use std::os::raw::c_void;
use std::path::PathBuf;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{assert_close, models_dir, serial};
use koila::dlpack::{
    self, DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLTensor, DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_VERSION,
};
use koila::{AdamOptions, Code, DType, Module, Optimizer, Reduction, SgdOptions, Tensor};

fn param(data: &[f32], shape: &[i64]) -> Tensor {
    let mut p = Tensor::from_slice(data, shape).unwrap();
    p.set_requires_grad(true).unwrap();
    p
}

fn grad(p: &Tensor) -> Vec<f32> {
    p.grad().unwrap().expect("a gradient").to_vec::<f32>().unwrap()
}

/// loss = sum(p * p): its gradient is 2p.
fn square_loss(p: &Tensor) -> Tensor {
    p.mul(p).unwrap().sum(&[], false).unwrap()
}

/// A fresh folder for this test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("koila_rust_checkpoints_{}_{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn adamw_first_step_by_hand() {
    // Step 1: p -= lr * wd * p, then Adam's first update, lr * g / (|g| + eps) (m̂ = g, v̂ = g²).
    let (lr, wd) = (0.01f32, 0.1f32);
    let p = param(&[1.0, -2.0, 0.5], &[3]);
    let mut adamw = Optimizer::adamw(&[&p], AdamOptions::new(lr as f64).weight_decay(wd as f64)).unwrap();
    square_loss(&p).backward().unwrap();
    adamw.step().unwrap();
    let expected: Vec<f32> = [1.0f32, -2.0, 0.5].iter().map(|&v| v * (1.0 - lr * wd) - lr * v.signum()).collect();
    assert_close(&p.to_vec::<f32>().unwrap(), &expected, 1e-6);
    // The gradient is not changed by the decay (Adam's L2 would add wd * p to it).
    assert_eq!(grad(&p), vec![2.0, -4.0, 1.0]);

    // Adam with the same weight decay takes L2 into the gradient: its first step is lr * sign.
    let q = param(&[1.0, -2.0, 0.5], &[3]);
    let mut adam = Optimizer::adam(&[&q], AdamOptions::new(lr as f64).weight_decay(wd as f64)).unwrap();
    square_loss(&q).backward().unwrap();
    adam.step().unwrap();
    assert_close(&q.to_vec::<f32>().unwrap(), &[0.99, -1.99, 0.49], 1e-6);

    // The same ranges as Adam.
    let bad = AdamOptions { betas: (0.9, 1.0), ..AdamOptions::default() };
    assert_eq!(Optimizer::adamw(&[&p], bad).unwrap_err().code(), Code::InvalidArgument);
    let negative = AdamOptions::new(0.1).weight_decay(-1.0);
    assert_eq!(Optimizer::adamw(&[&p], negative).unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(Optimizer::adamw(&[], AdamOptions::default()).unwrap_err().code(), Code::InvalidArgument);
}

#[test]
fn learning_rate_round_trip() {
    let p = param(&[1.0, 2.0], &[2]);
    let mut sgd = Optimizer::sgd(&[&p], SgdOptions::new(0.1)).unwrap();
    assert_eq!(sgd.lr().unwrap(), 0.1);
    sgd.set_lr(0.25).unwrap();
    assert_eq!(sgd.lr().unwrap(), 0.25);
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        let e = sgd.set_lr(bad).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad}: {}", e.message());
        assert_eq!(sgd.lr().unwrap(), 0.25);
    }
    // The next step uses it: p - 0.25 * 2p = p / 2.
    square_loss(&p).backward().unwrap();
    sgd.step().unwrap();
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![0.5, 1.0]);
    let mut adamw = Optimizer::adamw(&[&p], AdamOptions::default()).unwrap();
    assert_eq!(adamw.lr().unwrap(), 1e-3);
    adamw.set_lr(0.0).unwrap();
    assert_eq!(adamw.lr().unwrap(), 0.0);
}

/// Trains `module` with AdamW for `steps` steps on a fixed batch (lr changed at step 1).
fn train(module: &Module, opt: &mut Optimizer, steps: usize) {
    koila::manual_seed(11).unwrap();
    let x = Tensor::randn(&[16, 784], DType::Float32, "cpu").unwrap();
    let labels: Vec<i64> = (0..16).map(|i| (i * 3) % 10).collect();
    let y = Tensor::from_slice(&labels, &[16]).unwrap();
    let logits = module.forward(&[&x.lazy(0).unwrap()]).unwrap();
    let loss = logits.cross_entropy(&y.lazy(0).unwrap(), Reduction::Mean).unwrap();
    for _ in 0..steps {
        opt.zero_grad().unwrap();
        loss.backward().unwrap();
        opt.step().unwrap();
    }
}

fn values(m: &Module) -> Vec<Vec<u32>> {
    let params = m.parameters().unwrap();
    params.iter().map(|p| p.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()).collect()
}

fn adamw_over(m: &Module, lr: f64) -> Optimizer {
    let params = m.parameters().unwrap();
    let refs: Vec<&Tensor> = params.iter().collect();
    Optimizer::adamw(&refs, AdamOptions::new(lr).weight_decay(0.01)).unwrap()
}

#[test]
fn a_run_resumed_from_its_checkpoint_equals_the_uninterrupted_run() {
    let _g = serial();
    let dir = scratch("resume");
    let original = models_dir().join("mlp.pt");

    // The uninterrupted run: 3 steps, a checkpoint, 3 more steps.
    let m = Module::load(&original, "cpu").unwrap();
    let mut opt = adamw_over(&m, 1e-3);
    train(&m, &mut opt, 2);
    opt.set_lr(5e-4).unwrap();
    train(&m, &mut opt, 1);
    m.save(dir.join("model.pt")).unwrap();
    opt.save(dir.join("adamw.state")).unwrap();
    let at_checkpoint = values(&m);
    train(&m, &mut opt, 3);
    let uninterrupted = values(&m);
    assert_ne!(at_checkpoint, uninterrupted);

    // A fresh process would do this: the module's file, a new optimizer over its parameters
    // (other hyperparameters: the file's replace them), the optimizer's file.
    let resumed = Module::load(dir.join("model.pt"), "cpu").unwrap();
    assert_eq!(values(&resumed), at_checkpoint);
    let mut opt2 = adamw_over(&resumed, 0.5);
    opt2.load(dir.join("adamw.state")).unwrap();
    assert_eq!(opt2.lr().unwrap(), 5e-4);
    train(&resumed, &mut opt2, 3);
    assert!(values(&resumed) == uninterrupted, "the resumed run's parameters differ from the uninterrupted run's");

    // Without the optimizer's state (fresh moments) the run differs: the file carried it.
    let fresh = Module::load(dir.join("model.pt"), "cpu").unwrap();
    let mut opt3 = adamw_over(&fresh, 5e-4);
    train(&fresh, &mut opt3, 3);
    assert_ne!(values(&fresh), uninterrupted);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn loading_a_bad_file_changes_nothing() {
    let dir = scratch("bad");
    let p = param(&[1.0, 2.0, 3.0], &[3]);
    let mut adamw = Optimizer::adamw(&[&p], AdamOptions::new(0.01)).unwrap();
    square_loss(&p).backward().unwrap();
    adamw.step().unwrap();
    let state = dir.join("adamw.state");
    adamw.save(&state).unwrap();
    let bytes = std::fs::read(&state).unwrap();

    // Truncated, corrupt (a flipped bit: the checksum fails) or missing: Io.
    let mut other = Optimizer::adamw(&[&p], AdamOptions::new(0.2)).unwrap();
    let truncated = dir.join("truncated.state");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let e = other.load(&truncated).unwrap_err();
    assert_eq!(e.code(), Code::Io, "{}", e.message());
    let corrupt = dir.join("corrupt.state");
    let mut flipped = bytes.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x10;
    std::fs::write(&corrupt, &flipped).unwrap();
    assert_eq!(other.load(&corrupt).unwrap_err().code(), Code::Io);
    assert_eq!(other.load(dir.join("missing.state")).unwrap_err().code(), Code::Io);
    assert_eq!(other.lr().unwrap(), 0.2);

    // Another kind of optimizer, or parameters of another shape: InvalidArgument.
    let mut sgd = Optimizer::sgd(&[&p], SgdOptions::new(0.3)).unwrap();
    let e = sgd.load(&state).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
    assert_eq!(sgd.lr().unwrap(), 0.3);
    let mut adam = Optimizer::adam(&[&p], AdamOptions::new(0.3)).unwrap();
    assert_eq!(adam.load(&state).unwrap_err().code(), Code::InvalidArgument);
    let wide = param(&[1.0; 4], &[4]);
    let mut wrong_shape = Optimizer::adamw(&[&wide], AdamOptions::new(0.3)).unwrap();
    assert_eq!(wrong_shape.load(&state).unwrap_err().code(), Code::InvalidArgument);
    let mut two = Optimizer::adamw(&[&p, &wide], AdamOptions::new(0.3)).unwrap();
    assert_eq!(two.load(&state).unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(two.lr().unwrap(), 0.3);

    // A failed save (no such folder) is Io too; the good file loads.
    assert_eq!(adamw.save(dir.join("no/such/folder/x.state")).unwrap_err().code(), Code::Io);
    other.load(&state).unwrap();
    assert_eq!(other.lr().unwrap(), 0.01);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn clip_grad_norm_by_hand() {
    // Gradients [3, 4] and [12]: joint norm 13.
    let p = param(&[1.0, 1.0], &[2]);
    let q = param(&[1.0], &[1]);
    let no_grad = param(&[5.0], &[1]);
    let c = Tensor::from_slice(&[3.0f32, 4.0], &[2]).unwrap();
    let q_term = q.mul_scalar(12.0).unwrap().sum(&[], false).unwrap();
    let loss = p.mul(&c).unwrap().sum(&[], false).unwrap().add(&q_term).unwrap();
    loss.backward().unwrap();
    let norm = koila::clip_grad_norm(&[&p, &q, &no_grad], 6.5).unwrap();
    assert!((norm - 13.0).abs() < 1e-5, "{norm}");
    let scale = (6.5 / (13.0 + 1e-6)) as f32;
    assert_close(&grad(&p), &[3.0 * scale, 4.0 * scale], 1e-6);
    assert_close(&grad(&q), &[12.0 * scale], 1e-6);
    assert!(no_grad.grad().unwrap().is_none());
    // Under max_norm nothing changes; the norm is the clipped one now.
    let before = (grad(&p), grad(&q));
    let norm = koila::clip_grad_norm(&[&p, &q], 100.0).unwrap();
    assert!((norm - 6.5).abs() < 1e-4, "{norm}");
    assert_eq!((grad(&p), grad(&q)), before);
    // Bad arguments.
    assert_eq!(koila::clip_grad_norm(&[&p], -1.0).unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(koila::clip_grad_norm(&[&p], f64::NAN).unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(koila::clip_grad_norm(&[&p, &p], 1.0).unwrap_err().code(), Code::InvalidArgument);
    let plain = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
    assert_eq!(koila::clip_grad_norm(&[&plain], 1.0).unwrap_err().code(), Code::InvalidArgument);

    // A NaN in a gradient: InvalidArgument, and no gradient changes (skip the step).
    let r = param(&[1.0, 2.0], &[2]);
    r.mul_scalar(f64::NAN).unwrap().sum(&[], false).unwrap().backward().unwrap();
    let e = koila::clip_grad_norm(&[&p, &r], 1.0).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
    assert_eq!(grad(&p), before.0);

    // No gradient at all: the norm is 0, and nothing to clip is no error.
    assert_eq!(koila::clip_grad_norm(&[&no_grad], 1.0).unwrap(), 0.0);
}

// ---- DLPack ---------------------------------------------------------------------------

#[test]
fn a_tensor_exported_and_imported_shares_its_memory() {
    for versioned in [false, true] {
        let mut t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
        let managed = t.to_dlpack(versioned).unwrap();
        // What koila wrote: the CPU, float32, its sizes and strides.
        let dl = unsafe {
            if versioned {
                let m = &*managed.cast::<DLManagedTensorVersioned>();
                assert_eq!(m.version, DLPACK_VERSION);
                assert_eq!(m.flags, 0);
                m.dl_tensor
            } else {
                (*managed.cast::<DLManagedTensor>()).dl_tensor
            }
        };
        assert_eq!(dl.device, DLDevice { device_type: dlpack::kDLCPU, device_id: 0 });
        assert_eq!(dl.dtype, DLDataType { code: dlpack::kDLFloat, bits: 32, lanes: 1 });
        assert_eq!(dl.ndim, 2);
        unsafe {
            assert_eq!(std::slice::from_raw_parts(dl.shape, 2), &[2, 3]);
            assert_eq!(std::slice::from_raw_parts(dl.strides, 2), &[3, 1]);
            let data = dl.data.cast::<u8>().add(dl.byte_offset as usize).cast::<f32>();
            assert_eq!(std::slice::from_raw_parts(data, 6), &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        }
        // Back into koila: the same memory. A step on t is seen through u.
        let u = unsafe { Tensor::from_dlpack(managed, versioned) }.unwrap();
        assert_eq!((u.shape().unwrap(), u.is_lazy().unwrap()), (vec![2, 3], false));
        assert_eq!(u.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
        t.set_requires_grad(true).unwrap();
        let mut sgd = Optimizer::sgd(&[&t], SgdOptions::new(1.0)).unwrap();
        t.sum(&[], false).unwrap().backward().unwrap();
        sgd.step().unwrap();
        assert_eq!(u.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        drop((t, sgd));
        assert_eq!(u.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    }
    // A lazy tensor is evaluated; the consumer calls the deleter.
    let two = Tensor::from_slice(&[2i64], &[1]).unwrap();
    let x = Tensor::from_slice(&[1i64, 2, 3], &[3]).unwrap().lazy(0).unwrap().mul(&two).unwrap();
    assert!(x.is_lazy().unwrap());
    let managed = x.to_dlpack(true).unwrap();
    unsafe {
        let dl = (*managed.cast::<DLManagedTensorVersioned>()).dl_tensor;
        assert_eq!(dl.dtype, DLDataType { code: dlpack::kDLInt, bits: 64, lanes: 1 });
        assert_eq!(std::slice::from_raw_parts(dl.data.cast::<i64>(), 3), &[2, 4, 6]);
        dlpack::delete(managed, true);
    }
}

/// A DLPack struct of either form over memory this test owns; the deleter counts its calls
/// in the AtomicUsize manager_ctx points to.
struct Producer {
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    deleted: Box<AtomicUsize>,
    plain: DLManagedTensor,
    versioned: DLManagedTensorVersioned,
}

unsafe extern "C" fn count_plain(m: *mut DLManagedTensor) {
    (*(*m).manager_ctx.cast::<AtomicUsize>()).fetch_add(1, Ordering::SeqCst);
}

unsafe extern "C" fn count_versioned(m: *mut DLManagedTensorVersioned) {
    (*(*m).manager_ctx.cast::<AtomicUsize>()).fetch_add(1, Ordering::SeqCst);
}

impl Producer {
    fn new(data: *mut f32, shape: &[i64], strides: Option<&[i64]>) -> Box<Producer> {
        let mut p = Box::new(Producer {
            shape: shape.to_vec(),
            strides: strides.map(|s| s.to_vec()),
            deleted: Box::new(AtomicUsize::new(0)),
            plain: DLManagedTensor {
                dl_tensor: empty_tensor(),
                manager_ctx: ptr::null_mut(),
                deleter: Some(count_plain),
            },
            versioned: DLManagedTensorVersioned {
                version: DLPACK_VERSION,
                manager_ctx: ptr::null_mut(),
                deleter: Some(count_versioned),
                flags: 0,
                dl_tensor: empty_tensor(),
            },
        });
        let ctx: *mut c_void = (&*p.deleted as *const AtomicUsize as *mut AtomicUsize).cast();
        let tensor = DLTensor {
            data: data.cast(),
            device: DLDevice { device_type: dlpack::kDLCPU, device_id: 0 },
            ndim: shape.len() as i32,
            dtype: DLDataType { code: dlpack::kDLFloat, bits: 32, lanes: 1 },
            shape: p.shape.as_mut_ptr(),
            strides: p.strides.as_mut().map_or(ptr::null_mut(), |s| s.as_mut_ptr()),
            byte_offset: 0,
        };
        p.plain.dl_tensor = tensor;
        p.plain.manager_ctx = ctx;
        p.versioned.dl_tensor = tensor;
        p.versioned.manager_ctx = ctx;
        p
    }

    /// Hands one of the two structs to koila.
    fn import(&mut self, versioned: bool) -> koila::Result<Tensor> {
        let managed: *mut c_void = if versioned {
            (&mut self.versioned as *mut DLManagedTensorVersioned).cast()
        } else {
            (&mut self.plain as *mut DLManagedTensor).cast()
        };
        unsafe { Tensor::from_dlpack(managed, versioned) }
    }

    fn deletions(&self) -> usize {
        self.deleted.load(Ordering::SeqCst)
    }
}

fn empty_tensor() -> DLTensor {
    DLTensor {
        data: ptr::null_mut(),
        device: DLDevice { device_type: dlpack::kDLCPU, device_id: 0 },
        ndim: 0,
        dtype: DLDataType { code: dlpack::kDLFloat, bits: 32, lanes: 1 },
        shape: ptr::null_mut(),
        strides: ptr::null_mut(),
        byte_offset: 0,
    }
}

/// Reads the Vec's elements through its raw pointer (koila writes through the same memory).
fn read(data: *const f32, n: usize) -> Vec<f32> {
    unsafe { std::slice::from_raw_parts(data, n).to_vec() }
}

#[test]
fn a_vec_imported_without_a_copy_sees_koilas_writes() {
    for versioned in [false, true] {
        let mut storage = vec![1.0f32, -2.0, 3.0, -4.0];
        let data = storage.as_mut_ptr();
        let mut producer = Producer::new(data, &[2, 2], None);
        let mut t = producer.import(versioned).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, -2.0, 3.0, -4.0]);
        assert_eq!(producer.deletions(), 0);
        // An optimizer step writes into the Vec: p - 0.25 * 2p = p / 2.
        t.set_requires_grad(true).unwrap();
        let mut sgd = Optimizer::sgd(&[&t], SgdOptions::new(0.25)).unwrap();
        let loss = square_loss(&t);
        loss.backward().unwrap();
        sgd.step().unwrap();
        assert_eq!(read(data, 4), vec![0.5, -1.0, 1.5, -2.0]);
        // Koila's handles keep the memory until the last one goes; then the deleter runs once.
        drop(t);
        assert_eq!(producer.deletions(), 0);
        drop((sgd, loss));
        assert_eq!(producer.deletions(), 1, "versioned {versioned}");
        drop(producer);
        assert_eq!(storage, vec![0.5, -1.0, 1.5, -2.0]);
    }

    // Strides in elements: a column-major [2, 3] (strides [1, 2]) reads as its transpose's memory.
    let mut storage = vec![1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
    let mut producer = Producer::new(storage.as_mut_ptr(), &[2, 3], Some(&[1, 2]));
    let t = producer.import(true).unwrap();
    assert_eq!(t.shape().unwrap(), vec![2, 3]);
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    drop(t);
    assert_eq!(producer.deletions(), 1);
}

#[test]
fn a_refused_import_still_calls_the_deleter_once() {
    let mut storage = vec![0.0f32; 8];
    let data = storage.as_mut_ptr();
    type Spoil = fn(&mut Producer);
    let cases: [(&str, bool, Spoil, Code); 7] = [
        ("read-only", true, |p| p.versioned.flags |= DLPACK_FLAG_BITMASK_READ_ONLY, Code::Unsupported),
        ("DLPack 2.0", true, |p| p.versioned.version.major = 2, Code::Unsupported),
        ("a CUDA device", false, |p| p.plain.dl_tensor.device.device_type = dlpack::kDLCUDA, Code::Unsupported),
        ("two lanes", false, |p| p.plain.dl_tensor.dtype.lanes = 2, Code::Unsupported),
        ("complex", false, |p| p.plain.dl_tensor.dtype.code = 5, Code::Unsupported),
        ("misaligned", false, |p| p.plain.dl_tensor.byte_offset = 2, Code::Unsupported),
        ("negative ndim", true, |p| p.versioned.dl_tensor.ndim = -1, Code::InvalidArgument),
    ];
    for (what, versioned, spoil, code) in cases {
        let mut producer = Producer::new(data, &[2, 4], None);
        spoil(&mut producer);
        let e = producer.import(versioned).unwrap_err();
        assert_eq!(e.code(), code, "{what}: {}", e.message());
        assert_eq!(producer.deletions(), 1, "{what}");
    }
    // Negative strides, a negative size, NULL data with elements.
    let mut producer = Producer::new(data, &[2, 4], Some(&[-4, 1]));
    assert_eq!(producer.import(false).unwrap_err().code(), Code::Unsupported);
    assert_eq!(producer.deletions(), 1);
    let mut producer = Producer::new(data, &[2, -4], None);
    assert_eq!(producer.import(false).unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(producer.deletions(), 1);
    let mut producer = Producer::new(ptr::null_mut(), &[2, 4], None);
    assert_eq!(producer.import(true).unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(producer.deletions(), 1);
    // NULL is refused with nothing to delete.
    assert_eq!(unsafe { Tensor::from_dlpack(ptr::null_mut(), true) }.unwrap_err().code(), Code::InvalidArgument);
    // A versioned flag other than 0 or 1 (only the raw API can pass one) leaves managed alone.
    let mut producer = Producer::new(data, &[2, 4], None);
    let mut out = ptr::null_mut();
    let managed = (&mut producer.plain as *mut DLManagedTensor).cast();
    let status = unsafe { koila::sys::koila_tensor_from_dlpack(&mut out, managed, 2) };
    assert!(!status.is_null() && out.is_null());
    assert_eq!(unsafe { koila::sys::koila_status_code(status) }, koila::sys::KOILA_ERROR_INVALID_ARGUMENT);
    unsafe { koila::sys::koila_status_free(status) };
    assert_eq!(producer.deletions(), 0);
    drop(storage);
}

#[test]
fn from_vec_hands_a_vec_over_without_copying() {
    let mut t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]).unwrap();
    assert_eq!((t.shape().unwrap(), t.dtype().unwrap()), (vec![3, 2], DType::Float32));
    t.set_requires_grad(true).unwrap();
    let mut sgd = Optimizer::sgd(&[&t], SgdOptions::new(0.5)).unwrap();
    t.sum(&[], false).unwrap().backward().unwrap();
    sgd.step().unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![0.5, 1.5, 2.5, 3.5, 4.5, 5.5]);
    // Every element type; a scalar; an empty Vec.
    assert_eq!(Tensor::from_vec(vec![7i64, 8], &[2]).unwrap().to_vec::<i64>().unwrap(), vec![7, 8]);
    assert_eq!(Tensor::from_vec(vec![true, false], &[2]).unwrap().to_vec::<bool>().unwrap(), vec![true, false]);
    assert_eq!(Tensor::from_vec(vec![200u8], &[]).unwrap().item().unwrap(), 200.0);
    assert_eq!(Tensor::from_vec(vec![-3i8, 4], &[2, 1]).unwrap().to_vec::<i8>().unwrap(), vec![-3, 4]);
    assert_eq!(Tensor::from_vec(vec![0.5f64], &[1]).unwrap().to_vec::<f64>().unwrap(), vec![0.5]);
    assert_eq!(Tensor::from_vec(vec![9i32], &[1, 1]).unwrap().to_vec::<i32>().unwrap(), vec![9]);
    assert_eq!(Tensor::from_vec(Vec::<f32>::new(), &[0, 3]).unwrap().shape().unwrap(), vec![0, 3]);
    // A shape that does not fit the Vec.
    assert_eq!(Tensor::from_vec(vec![1.0f32; 5], &[2, 3]).unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(Tensor::from_vec(vec![1.0f32; 6], &[-2, -3]).unwrap_err().code(), Code::InvalidArgument);
    // Shared onwards: exported, the Vec's memory goes on living until the consumer is done.
    let managed = t.to_dlpack(false).unwrap();
    drop((t, sgd));
    let u = unsafe { Tensor::from_dlpack(managed, false) }.unwrap();
    assert_eq!(u.to_vec::<f32>().unwrap(), vec![0.5, 1.5, 2.5, 3.5, 4.5, 5.5]);
}

/// The generators' file: the draws after a load are those that followed the save, and a
/// missing or garbage file is an IO error that changes no generator.
#[test]
fn rng_file_puts_the_generators_back() {
    let _g = serial();
    let dir = scratch("rng");
    let path = dir.join("rng.bin");
    let draw = || Tensor::randn(&[16], DType::Float32, "cpu").unwrap().to_vec::<f32>().unwrap();
    koila::manual_seed(3).unwrap();
    draw();
    koila::rng_save(&path).unwrap();
    let after_save = draw();
    let later = draw();
    assert_ne!(after_save, later);
    koila::rng_load(&path).unwrap();
    assert_eq!(draw(), after_save);
    assert_eq!(draw(), later);

    std::fs::write(dir.join("garbage.bin"), b"not a generator file at all").unwrap();
    koila::rng_load(&path).unwrap();
    for bad in [dir.join("missing.bin"), dir.join("garbage.bin")] {
        let err = koila::rng_load(&bad).unwrap_err();
        assert_eq!(err.code(), Code::Io, "{}", err);
        assert!(err.to_string().contains("no generator is changed"), "{}", err);
        assert_eq!(draw(), after_save, "a failed load changed a generator");
        koila::rng_load(&path).unwrap();
    }
}
