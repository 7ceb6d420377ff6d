"""PyTorch's own results for koila's AdamW, learning-rate changes and gradient clipping
(tests/test_checkpoints.cpp). Run with any PyTorch:

    make_references.py OUT.pt

It writes one torch.save'd dict of tensors (float32 and float64 parameters, gradients given
rather than computed, so that the optimizers alone are compared):
  p{i}              the initial parameters
  g{t}_{i}          the gradient of parameter i at step t (STEPS steps)
  adamw{t}_{i}      parameter i after step t of torch.optim.AdamW(lr=LR, betas=BETAS,
                    eps=EPS, weight_decay=WD), with the learning rate set to LR2 before
                    step LR_STEP (as a schedule does)
  clipnorm{t}       clip_grad_norm_(params, MAX_NORM)'s result before step t of a second
                    AdamW run that clips every gradient first
  clipped{t}_{i}    parameter i after that step
  info              [STEPS, LR, LR2, LR_STEP, BETA1, BETA2, EPS, WD, MAX_NORM] (float64)
Single-tensor updates (foreach=False), as on the CPU by default.
"""
import sys

import torch

STEPS, LR, LR2, LR_STEP = 6, 1e-2, 4e-3, 3
BETA1, BETA2, EPS, WD, MAX_NORM = 0.9, 0.99, 1e-7, 0.05, 0.75
SHAPES = [((4, 3), torch.float32), ((3,), torch.float32), ((2, 2, 5), torch.float64)]


def run(params, grads, clip):
    ps = [p.clone().requires_grad_(True) for p in params]
    opt = torch.optim.AdamW(ps, lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WD, foreach=False)
    after, norms = [], []
    for t in range(STEPS):
        if t == LR_STEP:
            for group in opt.param_groups:
                group["lr"] = LR2
        for p, g in zip(ps, grads[t]):
            p.grad = g.clone()
        if clip:
            norms.append(torch.nn.utils.clip_grad_norm_(ps, MAX_NORM, foreach=False).double().reshape(1))
        opt.step()
        after.append([p.detach().clone() for p in ps])
    return after, norms


def main():
    torch.manual_seed(29)
    params = [torch.randn(s, dtype=d) for s, d in SHAPES]
    # Gradients of growing size, so that clipping scales some steps and not others.
    grads = [[torch.randn(s, dtype=d) * (0.1 + 0.3 * t) for s, d in SHAPES] for t in range(STEPS)]
    out = {}
    for i, p in enumerate(params):
        out[f"p{i}"] = p
    for t in range(STEPS):
        for i, g in enumerate(grads[t]):
            out[f"g{t}_{i}"] = g
    adamw, _ = run(params, grads, clip=False)
    clipped, norms = run(params, grads, clip=True)
    for t in range(STEPS):
        for i in range(len(params)):
            out[f"adamw{t}_{i}"] = adamw[t][i]
            out[f"clipped{t}_{i}"] = clipped[t][i]
        out[f"clipnorm{t}"] = norms[t]
    out["info"] = torch.tensor([STEPS, LR, LR2, LR_STEP, BETA1, BETA2, EPS, WD, MAX_NORM], dtype=torch.float64)
    torch.save(out, sys.argv[1])


if __name__ == "__main__":
    main()
