#!/usr/bin/env python3
"""The least memory that any recomputation could train bench_recompute's models in, measured on
PyTorch's own autograd graph of them: the reference that says whether a budget koila refuses
could be planned at all.

usage: recompute_floor.py [model...]     (a python3 with torch and torchvision; every model of
                                          recompute_checkpoint.py unless some are named)

Whatever a schedule frees and recomputes, each backward function of the graph runs once with
what it saved (its inputs or results), the gradients of its results and the gradients it
computes all present, and the parameters' gradients already made are kept to the end. So the
step's peak beyond the parameters is at least, for every backward function f in the order
autograd runs them,

    saved(f) + grads in(f) + grads out(f) + the parameters' gradients made before f

(storages counted once each). This bound ignores what a schedule must keep besides (other
gradients in flight, the values later functions need, the checkpoints), so no schedule reaches
it; it is the floor under every plan, koila's, torch.utils.checkpoint's, Checkmate's.

Printed per model: its parameters' bytes, the floor (MiB beyond the parameters, their gradients
included, as bench_recompute's budgets are beyond what is in use), and the backward function
that sets it. A budget of bench_recompute's below the floor (with koila's 10% margin on its
estimate) cannot be planned by any schedule of these ops; one above it but refused is a limit of
koila's choice (one level of recomputation: a segment's backward holds all its values).
"""

import sys

import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
from recompute_checkpoint import models  # noqa: E402


def storage_key_bytes(t):
    try:
        s = t.untyped_storage()
    except AttributeError:  # (PyTorch 1.x)
        s = t.storage()
    return s.data_ptr(), s.nbytes()


def saved_tensors(node):
    out = []
    for name in dir(node):
        if not name.startswith("_saved_"):
            continue
        try:
            v = getattr(node, name)
        except Exception:  # (a saved value already freed, or not a tensor)
            continue
        for t in v if isinstance(v, (list, tuple)) else (v,):
            if isinstance(t, torch.Tensor):
                out.append(t)
    return out


def floor(model, x):
    for p in model.parameters():
        p.grad = None
    y = model(x, False)
    loss = (y * y).mean()
    # Every backward function reachable from the loss, with what it saved.
    saved = {}
    stack, seen = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        saved[node] = {}
        for t in saved_tensors(node):
            k, n = storage_key_bytes(t)
            saved[node][k] = n
        stack.extend(next_node for next_node, _ in node.next_functions)
    params_made = [0]
    for p in model.parameters():
        p.register_hook(lambda g, n=p.numel() * p.element_size(): params_made.__setitem__(0, params_made[0] + n))
    worst = [0, ""]

    def hook(node):
        def at(grads_in, grads_out):
            live = dict(saved[node])
            for g in tuple(grads_in) + tuple(grads_out):
                if isinstance(g, torch.Tensor):
                    k, n = storage_key_bytes(g)
                    live[k] = n
            total = sum(live.values()) + params_made[0]
            if total > worst[0]:
                worst[0], worst[1] = total, node.name()

        return at

    for node in saved:
        if node.name() != "torch::autograd::AccumulateGrad":
            node.register_hook(hook(node))
    loss.backward()
    return worst[0], worst[1]


def main():
    torch.manual_seed(0)
    names = sys.argv[1:]
    print("PyTorch %s: the least peak any recomputation could train each model in (MiB beyond the parameters)\n"
          % torch.__version__)
    print("| model | parameters MiB | floor MiB | set by |")
    print("|---|---:|---:|---|")
    for name, cls in models():
        if names and name not in names:
            continue
        model = cls()
        x = torch.randn(*cls.shape)
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        least, where = floor(model, x)
        print("| %s | %.1f | %.1f | %s |" % (name, params / 2**20, least / 2**20, where))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
