//! The README quick start in Rust: an MNIST-sized MLP (28*28 -> 512 -> 512 -> 10) whose
//! input and labels are made lazy with one line each, trained for a few SGD steps.
//! Building the graph runs nothing; shapes are known at once; backward evaluates, in
//! chunks when the batch does not fit the memory budget.
//!
//!     cargo run --example mlp -- [batch] [steps]
use koila::{DType, Mode, Optimizer, Plan, Reduction, SgdOptions, Tensor};

fn parameter(shape: &[i64]) -> koila::Result<Tensor> {
    let mut p = Tensor::randn(shape, DType::Float32, "cpu")?.mul_scalar(0.05)?;
    p.set_requires_grad(true)?;
    Ok(p)
}

fn main() -> koila::Result<()> {
    let mut args = std::env::args().skip(1);
    let batch: i64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let steps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    koila::manual_seed(0)?;

    // A batch of MNIST-sized images and their labels.
    let images = Tensor::randn(&[batch, 28, 28], DType::Float32, "cpu")?;
    let labels: Vec<i64> = (0..batch).map(|i| i % 10).collect();
    let labels = Tensor::from_slice(&labels, &[batch])?;

    // The one line: wrap input and labels; dim 0 is the batch.
    let x = images.lazy(0)?;
    let y = labels.lazy(0)?;

    let (w1, b1) = (parameter(&[512, 28 * 28])?, parameter(&[512])?);
    let (w2, b2) = (parameter(&[512, 512])?, parameter(&[512])?);
    let (w3, b3) = (parameter(&[10, 512])?, parameter(&[10])?);
    let mut sgd = Optimizer::sgd(&[&w1, &b1, &w2, &b2, &w3, &b3], SgdOptions::new(0.1))?;

    // The model: flatten, Linear-ReLU, Linear-ReLU, Linear; then cross entropy.
    let logits = x
        .flatten(1, -1)?
        .linear(&w1, Some(&b1))?
        .relu()?
        .linear(&w2, Some(&b2))?
        .relu()?
        .linear(&w3, Some(&b3))?;
    let loss = logits.cross_entropy(&y, Reduction::Mean)?;

    // Metadata is known without running anything.
    println!("logits: {:?} (inferred, nothing computed yet)", logits.shape()?);
    println!("plan: {}", Plan::new(&loss, Mode::Training)?.describe()?);

    // Each backward evaluates the graph afresh with the current parameters.
    for step in 0..steps {
        println!("step {step}: loss {:.6}", loss.item()?);
        sgd.zero_grad()?;
        loss.backward()?;
        sgd.step()?;
    }
    println!("after {steps} steps: loss {:.6}", loss.item()?);
    println!("w3 has a gradient: {}", if w3.grad()?.is_some() { "yes" } else { "no" });
    Ok(())
}
