"""The reference for bench_groups' workers: the same MLP (1024-1024-1024-10, float32, cross
entropy MEAN) under PyTorch's DistributedDataParallel over Gloo, started by torchrun; each worker
its shard of the global batch (uneven where it does not divide). Prints, as bench_groups --worker
does, its medians of a backward without the all-reduce (no_sync) and of a DDP step's backward
(the all-reduce overlapped with it, as DDP does): "worker RANK of WORLD: local MS step MS".

  torchrun --nproc-per-node N bench/groups_ddp.py [batch] [repeats]
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

batch = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 10))
ddp = torch.nn.parallel.DistributedDataParallel(model)
start, end = batch * rank // world, batch * (rank + 1) // world
x = torch.randn(batch, 1024)[start:end]
y = (torch.arange(start, end) % 10)


def backward(sync):
    ddp.zero_grad()
    t0 = time.perf_counter()
    if sync:
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
    else:
        with ddp.no_sync():
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
    return time.perf_counter() - t0


local, step = [], []
for i in range(repeats + 1):
    a, b = backward(False), backward(True)
    if i:
        local.append(a)
        step.append(b)
print(f"worker {rank} of {world}: local {statistics.median(local) * 1e3:.2f} step {statistics.median(step) * 1e3:.2f}",
      flush=True)
dist.destroy_process_group()
