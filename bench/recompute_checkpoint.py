#!/usr/bin/env python3
"""PyTorch's own recomputation, torch.utils.checkpoint, on bench_recompute's models (the
reference its table is read against): one sample, a training step unconstrained and with
checkpoints, CPU, the fastest of N steps after a warm-up (the machine's speed drifts).

usage: recompute_checkpoint.py [repeats [model...]]   (a python3 with torch: Debian's python3-torch, or
                                              the torch 2.14.1 venv of scripts/setup_torch2.sh)

Checkpoints are PyTorch's usual ones: every transformer layer, every residual block, every
U-Net level (encoder and decoder; every double convolution), and checkpoint_sequential over the MLP in sqrt(24) ~ 5
segments. The memory is the step's peak resident set beyond what was resident before it
(/proc/self/status VmHWM, reset through /proc/self/clear_refs), with large allocations
mmapped (MALLOC_MMAP_THRESHOLD_=65536, set by re-executing itself) so that freed tensors leave
the resident set: a measure of the process, not of an allocator, so it includes what the
interpreter touches (a few MiB).
"""

import math
import os
import sys
import time

if os.environ.get("MALLOC_MMAP_THRESHOLD_") != "65536":
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint, checkpoint_sequential  # noqa: E402


def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def ckpt(fn, *args):
    try:
        return checkpoint(fn, *args, use_reentrant=False)
    except TypeError:  # (older PyTorch without use_reentrant)
        return checkpoint(fn, *args)


def attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v)
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ v  # (PyTorch 1.x)


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.n1(x)
        x = x + self.o(attention(self.q(h), self.k(h), self.v(h)))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class Transformer(nn.Module):
    shape = (1, 1024, 128)

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer(128) for _ in range(6))

    def forward(self, x, checkpointed):
        for layer in self.layers:
            x = ckpt(layer, x) if checkpointed else layer(x)
        return x


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a, self.b = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.Conv2d(c, c, 3, padding=1, bias=False)

    def forward(self, x):
        return F.relu(x + self.b(F.relu(self.a(x))))


class ResNet(nn.Module):
    shape = (1, 3, 128, 128)

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, padding=1, bias=False)
        self.blocks = nn.ModuleList(Block(32) for _ in range(8))

    def forward(self, x, checkpointed):
        x = F.relu(self.stem(x))
        for b in self.blocks:
            x = ckpt(b, x) if checkpointed else b(x)
        return x


class Double(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.a, self.b = nn.Conv2d(i, o, 3, padding=1, bias=False), nn.Conv2d(o, o, 3, padding=1, bias=False)

    def forward(self, x):
        return F.relu(self.b(F.relu(self.a(x))))


class UNet(nn.Module):
    shape = (1, 3, 128, 128)

    def __init__(self):
        super().__init__()
        w = [16, 32, 64]
        self.down = nn.ModuleList([Double(3, 16), Double(16, 32), Double(32, 64)])
        self.mid = nn.Conv2d(64, 128, 3, padding=1, bias=False)
        self.up = nn.ModuleList([Double(128 + 64, 64), Double(64 + 32, 32), Double(32 + 16, 16)])
        self.out = nn.Conv2d(16, 1, 3, padding=1, bias=False)
        self.w = w

    def forward(self, x, checkpointed):
        run = (lambda m, *a: ckpt(m, *a)) if checkpointed else (lambda m, *a: m(*a))
        skips = []
        for d in self.down:
            x = run(d, x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = F.relu(self.mid(x))
        for u, s in zip(self.up, reversed(skips)):
            x = F.interpolate(x, scale_factor=2, mode="nearest")
            x = run(u, torch.cat([x, s], 1))
        return self.out(x)


class ResNet34(nn.Module):
    """torchvision's resnet34, a checkpoint per BasicBlock."""

    shape = (1, 3, 512, 512)

    def __init__(self):
        super().__init__()
        import torchvision

        self.net = torchvision.models.resnet34()

    def forward(self, x, checkpointed):
        n = self.net
        x = n.maxpool(n.relu(n.bn1(n.conv1(x))))
        for stage in (n.layer1, n.layer2, n.layer3, n.layer4):
            for block in stage:
                x = ckpt(block, x) if checkpointed else block(x)
        return n.fc(torch.flatten(n.avgpool(x), 1))


class DoubleBN(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.seq = nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(),
                                 nn.Conv2d(o, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU())

    def forward(self, x):
        return self.seq(x)


class UNetBN(nn.Module):
    """The U-Net as milesial/Pytorch-UNet writes it (double convolutions with batch norm, five
    levels), at half its widths (32 to 512 channels), nearest upsampling; a checkpoint per double
    convolution."""

    shape = (1, 3, 256, 256)

    def __init__(self):
        super().__init__()
        w = [32, 64, 128, 256, 512]
        self.down = nn.ModuleList([DoubleBN(3, w[0])] + [DoubleBN(w[i], w[i + 1]) for i in range(4)])
        self.up = nn.ModuleList([DoubleBN(w[i + 1] + w[i], w[i]) for i in reversed(range(4))])
        self.out = nn.Conv2d(w[0], 2, 1, bias=False)

    def forward(self, x, checkpointed):
        run = (lambda m, *a: ckpt(m, *a)) if checkpointed else (lambda m, *a: m(*a))
        skips = []
        for i, d in enumerate(self.down):
            if i > 0:
                skips.append(x)
                x = F.max_pool2d(x, 2)
            x = run(d, x)
        for u, s in zip(self.up, reversed(skips)):
            x = run(u, torch.cat([s, F.interpolate(x, scale_factor=2, mode="nearest")], 1))
        return self.out(x)


class Mlp(nn.Module):
    shape = (1, 2048, 256)

    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(*[m for _ in range(24) for m in (nn.Linear(256, 256), nn.GELU())])

    def forward(self, x, checkpointed):
        if checkpointed:
            try:
                return checkpoint_sequential(self.seq, int(round(math.sqrt(24))), x, use_reentrant=False)
            except TypeError:  # (older PyTorch without use_reentrant)
                return checkpoint_sequential(self.seq, int(round(math.sqrt(24))), x)
        return self.seq(x)


def models():
    return (("transformer", Transformer), ("resnet", ResNet), ("unet", UNet), ("mlp", Mlp),
            ("resnet34", ResNet34), ("unet-bn", UNetBN))


def step(model, x, checkpointed):
    for p in model.parameters():
        p.grad = None
    before = rss_kib("VmRSS")
    reset_peak()
    start = time.perf_counter()
    y = model(x, checkpointed)
    (y * y).mean().backward()
    seconds = time.perf_counter() - start
    return seconds, (rss_kib("VmHWM") - before) / 1024.0


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    torch.manual_seed(0)
    torch.set_grad_enabled(True)
    print("PyTorch %s, torch.utils.checkpoint, one sample per step, CPU, fastest of %d steps (after a warm-up)\n"
          % (torch.__version__, repeats))
    print("| model | run | step ms | x unconstrained | peak MiB (resident, beyond before the step) | of unconstrained |")
    print("|---|---|---:|---:|---:|---:|")
    for name, cls in models():
        if len(sys.argv) > 2 and name not in sys.argv[2:]:
            continue
        model = cls()
        x = torch.randn(*cls.shape)
        results = {}
        for checkpointed in (False, True):
            step(model, x, checkpointed)  # warm-up
            runs = [step(model, x, checkpointed) for _ in range(repeats)]
            results[checkpointed] = (min(r[0] for r in runs), max(r[1] for r in runs))  # (the fastest step)
        base_t, base_m = results[False]
        for checkpointed, label in ((False, "unconstrained"), (True, "checkpointed")):
            t, m = results[checkpointed]
            print("| %s | %s | %.0f | %.2f | %.1f | %.2f |" % (name, label, 1e3 * t, t / base_t, m, m / base_m if base_m else 0))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
