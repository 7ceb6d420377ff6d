//! Process groups: two ranks as two threads of this process (each its own Gloo process
//! group over a file store), uneven shards, against the single-process full batch; bad
//! arguments.
use std::thread;
use std::time::Duration;

use koila::{Code, Group, Reduction, Tensor};

const BATCH: usize = 7;

fn inputs() -> Vec<f64> {
    (0..BATCH * 4).map(|i| ((i * 37 % 11) as f64 - 5.0) / 3.0).collect()
}

fn targets() -> Vec<i64> {
    // Sample 3's target is ignored: the MEAN averages over 6 of the 7.
    (0..BATCH as i64).map(|i| if i == 3 { -100 } else { i % 3 }).collect()
}

fn weights(offset: f64) -> Tensor {
    let values: Vec<f64> = (0..12).map(|i| (i as f64 * 0.1 - 0.5) + offset).collect();
    let mut w = Tensor::from_slice(&values, &[3, 4]).unwrap();
    w.set_requires_grad(true).unwrap();
    w
}

/// The loss over samples [start, end), lazy along the batch.
fn loss(w: &Tensor, start: usize, end: usize) -> Tensor {
    let n = (end - start) as i64;
    let x = Tensor::from_slice(&inputs()[start * 4..end * 4], &[n, 4]).unwrap().lazy(0).unwrap();
    let y = Tensor::from_slice(&targets()[start..end], &[n]).unwrap().lazy(0).unwrap();
    x.linear(w, None).unwrap().cross_entropy(&y, Reduction::Mean).unwrap()
}

#[test]
fn two_ranks_with_uneven_shards_get_the_full_batch_gradient() {
    let dir = std::env::temp_dir().join(format!("koila_rust_group_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let init = format!("file://{}/store", dir.display());
    let shards = [(0usize, 2usize), (2, BATCH)];
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let init = init.clone();
            thread::spawn(move || {
                let mut group = Group::new("gloo", &init, rank, 2, Duration::from_secs(20)).unwrap();
                assert_eq!((group.rank(), group.size()), (rank, 2));
                let w = weights(rank as f64); // differ until the broadcast
                group.broadcast(&[&w], 0).unwrap();
                let (start, end) = shards[rank as usize];
                group.backward(&loss(&w, start, end), &[&w]).unwrap();
                (w.to_vec::<f64>().unwrap(), w.grad().unwrap().unwrap().to_vec::<f64>().unwrap())
            })
        })
        .collect();
    let results: Vec<_> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
    let w = weights(0.0);
    loss(&w, 0, BATCH).backward().unwrap();
    let expected = w.grad().unwrap().unwrap().to_vec::<f64>().unwrap();
    for (values, grad) in &results {
        assert_eq!(values, &w.to_vec::<f64>().unwrap(), "the broadcast gives every rank rank 0's weights");
        for (g, e) in grad.iter().zip(&expected) {
            assert!((g - e).abs() < 1e-12, "gradient {grad:?} differs from the full batch's {expected:?}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_arguments_give_clean_codes() {
    let timeout = Duration::from_secs(1);
    let code = |r: koila::Result<Group>| r.unwrap_err().code();
    assert_eq!(code(Group::new("carrier-pigeon", "file:///tmp/x", 0, 1, timeout)), Code::InvalidArgument);
    assert_eq!(code(Group::new("gloo", "file:///tmp/x", 2, 2, timeout)), Code::InvalidArgument);
    assert_eq!(code(Group::new("gloo", "tcp://127.0.0.1", 0, 2, timeout)), Code::InvalidArgument);
    assert_eq!(code(Group::new("gloo", "file:///tmp/x", 0, 1, Duration::ZERO)), Code::InvalidArgument);
    assert_eq!(code(Group::new("gloo", "file:///tmp/x\0", 0, 1, timeout)), Code::InvalidArgument);
    // Rank 1 of 2 where no rank 0 listens.
    assert_eq!(code(Group::new("gloo", "tcp://127.0.0.1:9", 1, 2, Duration::from_millis(300))), Code::Io);
}

/// A group of one joined from a launcher's environment (rank 0 listens at MASTER_PORT): its
/// local rank is LOCAL_RANK; a missing variable is named. (The only test here that sets the
/// environment; the others never read it.)
#[test]
fn one_rank_joins_from_the_environment() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    for (name, value) in [
        ("RANK", "0".to_string()),
        ("WORLD_SIZE", "1".to_string()),
        ("LOCAL_RANK", "2".to_string()),
        ("MASTER_ADDR", "127.0.0.1".to_string()),
        ("MASTER_PORT", port.to_string()),
    ] {
        std::env::set_var(name, value);
    }
    std::env::remove_var("TORCHELASTIC_USE_AGENT_STORE");
    let group = Group::from_env("gloo", Duration::from_secs(10)).unwrap();
    assert_eq!((group.rank(), group.size(), group.local_rank()), (0, 1, 2));
    drop(group);
    std::env::remove_var("WORLD_SIZE");
    let err = Group::from_env("gloo", Duration::from_secs(1)).err().unwrap();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("WORLD_SIZE"), "{}", err.message());
}
