#!/usr/bin/python3
"""Writes koila's real-model corpus: TorchScript models and PyTorch's reference results.

usage: make_corpus.py OUT_DIR

For every model NAME it writes
  NAME.pt              the model, torch.jit.script (or torch.jit.trace where scripting
                       fails; the manifest says which), every dropout probability 0;
  NAME.MODE.ref.pt     for each module mode MODE ("train", and "eval" for models with
                       batch norm): a scripted module whose buffers, in this order, are
                         input        the batch (float32 images/sequences or int64 tokens)
                         target       int64 class indices
                         logits       model(input) in that mode (its first result, for
                                      models with several: results=N in the manifest)
                         loss         mean cross entropy of logits and target (a scalar);
                                      for models with several results, the sum over them
                                      of the manifest's loss= term (loss_of)
                         grad__P      d loss / d P for each parameter P, in
                                      named_parameters() order ('.' written '__')
                         chunks_of_one_distance  (where the model runs in chunks of one)
                                      how far PyTorch's own accumulation over chunks of
                                      one sample lands from those gradients
                       computed by PyTorch on the whole batch;
  NAME.per_chunk.ref.pt for batch-norm models: the same in train mode with the batch in 4
                       chunks whose batch norm uses each chunk's own statistics
                       (KOILA_BATCH_STATS_PER_CHUNK), in float64, plus chunk (the chunk
                       size), PyTorch's own float32 errors (err_logits, errgrad__P) and
                       stat__L__B for each batch-norm layer L and buffer B (running_mean,
                       running_var, num_batches_tracked) after one whole-batch update
                       (see per_chunk_reference);
  NAME.MODE.pt2        with a PyTorch that has torch.export (2.x): the model exported in
                       that module mode with a dynamic batch dim (torch.export.save),
                       checked to compute the same results; its references are NAME.MODE's
                       (the manifest's pt2= lists the modes that exported);
and last manifest.txt, one line per model (see MANIFEST_HEADER).

Batch-norm models are saved with running statistics warmed by a few training-mode passes,
so that eval mode is not the identity. Each reference is computed on a fresh load of the
saved model (train mode updates batch-norm statistics). Initializations that would stop
gradients (ViT's zero head, ConvNeXt's 1e-6 layer scale) are changed, so that every
parameter's gradient is compared.

Everything is seeded (torch.manual_seed per model), so two runs write the same numbers; a
corpus once written is cached and copied while this script and the versions stay the same
(see "Cache" below).
"""

import copy
import hashlib
import os
import shutil
import sys
import time
import warnings
from typing import Dict, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten

try:
    import torchvision
    from torchvision import models as tvm
    from torchvision.ops import StochasticDepth
except ImportError as e:  # pragma: no cover - reported to CMake
    sys.exit(f"make_corpus.py: torchvision is missing ({e}); scripts/setup.sh installs python3-torchvision")

# PyTorch 2.x deprecates TorchScript: torch.jit.script, trace and load warn (a
# DeprecationWarning in 2.13, a FutureWarning in 2.14.1) and still work, so nothing has to be
# set to make this corpus with them. Those warnings alone are silenced here; anything else,
# a refusal included, is reported as it comes.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.[a-z_]+` is deprecated")

CLASSES = 10
IMAGE_CHANNELS = 3
SEQ, FEATURES = 16, 16
VOCAB, TOKENS = 200, 32

MANIFEST_HEADER = (
    "# koila real-model corpus, written by tests/corpus/make_corpus.py (torch %s, torchvision %s)\n"
    "# name input=BxCx.. dtype=float32|int64 classes=N loss=cross_entropy_mean|squares_mean batchnorm=0|1 "
    "export=script|trace modes=train[,eval] params=N [results=N] [pt2=MODE[,MODE]]\n"
)


# ---- Models ---------------------------------------------------------------------------


class TransformerClassifier(nn.Module):
    """nn.TransformerEncoder over a sequence of feature vectors, mean-pooled, then linear."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(FEATURES, 32)
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.proj(x))
        return self.head(h.mean(dim=1))


class LSTMClassifier(nn.Module):
    """A 2-layer nn.LSTM; the last step's output goes to a linear head."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(FEATURES, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class GRUClassifier(nn.Module):
    """A bidirectional nn.GRU; the outputs, mean-pooled over time, go to a linear head."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(FEATURES, 24, num_layers=1, batch_first=True, bidirectional=True)
        self.head = nn.Linear(48, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out.mean(dim=1))


class EmbeddingClassifier(nn.Module):
    """Token ids -> nn.Embedding -> mean over the tokens -> MLP."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens).mean(dim=1)
        return self.fc2(torch.relu(self.fc1(h)))


class MultiTask(nn.Module):
    """A convolutional trunk with a dict of two classification heads (several results)."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(IMAGE_CHANNELS, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                   nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.label = nn.Linear(32 * 16, CLASSES)
        self.aux = nn.Linear(32 * 16, CLASSES)

    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        h = self.trunk(x)
        return {"label": self.label(h), "aux": self.aux(h)}


class LSTMFull(nn.Module):
    """A 2-layer nn.LSTM's whole return, (output, (h, c)): h and c carry the batch in dim 1."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(FEATURES, 32, num_layers=2, batch_first=True)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        return self.rnn(x)


class UNetSmall(nn.Module):
    """A two-level U-Net with GroupNorm: strided convolutions down, a transposed convolution
    and a bilinear upsampling up, skip connections concatenated; a 1x1 convolution to the
    classes, mean-pooled (the corpus's targets are one class per sample)."""

    @staticmethod
    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.ReLU())

    def __init__(self):
        super().__init__()
        self.enc1 = self.block(IMAGE_CHANNELS, 16)
        self.enc2 = self.block(16, 32)
        self.mid = self.block(32, 64)
        self.down1 = nn.Conv2d(16, 16, 2, stride=2)
        self.down2 = nn.Conv2d(32, 32, 2, stride=2)
        self.up2 = nn.ConvTranspose2d(64, 32, 2, stride=2)
        self.dec2 = self.block(64, 32)
        self.reduce1 = nn.Conv2d(32, 16, 1)
        self.dec1 = self.block(32, 16)
        self.head = nn.Conv2d(16, CLASSES, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(self.down1(e1))
        m = self.mid(self.down2(e2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        u1 = F.interpolate(self.reduce1(d2), scale_factor=2.0, mode="bilinear", align_corners=False)
        d1 = self.dec1(torch.cat([u1, e1], dim=1))
        return self.head(d1).mean(dim=(2, 3))


class Conv1dNet(nn.Module):
    """A 1-D convolutional classifier over sequences (features as channels): grouped and
    dilated convolutions with GroupNorm, a residual connection, then global mean pooling."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv1d(FEATURES, 32, 3, padding=1)
        self.norm0 = nn.GroupNorm(8, 32)
        self.grouped = nn.Conv1d(32, 32, 3, padding=2, dilation=2, groups=4)
        self.norm1 = nn.GroupNorm(8, 32)
        self.depthwise = nn.Conv1d(32, 32, 5, padding=8, dilation=4, groups=32)
        self.norm2 = nn.GroupNorm(8, 32)
        self.pointwise = nn.Conv1d(32, 48, 1)
        self.head = nn.Linear(48, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.norm0(self.stem(x.transpose(1, 2))))
        h = h + F.relu(self.norm1(self.grouped(h)))
        h = F.relu(self.norm2(self.depthwise(h)))
        return self.head(F.relu(self.pointwise(h)).mean(dim=2))


def images(batch, size):
    return lambda: torch.randn(batch, IMAGE_CHANNELS, size, size)


def sequences(batch):
    return lambda: torch.randn(batch, SEQ, FEATURES)


def tokens(batch):
    return lambda: torch.randint(VOCAB, (batch, TOKENS), dtype=torch.int64)


def vit_small():
    model = tvm.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128,
                                  num_classes=CLASSES)
    # torchvision starts the head at zero, so that no gradient would reach the encoder.
    nn.init.normal_(model.heads.head.weight, std=0.1)
    return model


def convnext_small():
    cfg = tvm.convnext.CNBlockConfig
    # layer_scale 0.5, not torchvision's 1e-6: the blocks' gradients are not a millionth of the rest.
    return tvm.convnext.ConvNeXt([cfg(16, 32, 2), cfg(32, None, 2)], layer_scale=0.5, stochastic_depth_prob=0.0,
                                 num_classes=CLASSES)


def swin_small():
    return tvm.swin_transformer.SwinTransformer(patch_size=[2, 2], embed_dim=16, depths=[2, 2], num_heads=[2, 2],
                                                window_size=[4, 4], stochastic_depth_prob=0.0,
                                                num_classes=CLASSES)


# name -> (constructor, input maker). Order: the order of the manifest and of the tests.
#
# Batch and image size: the full-size torchvision CNNs hold megabytes of parameters, and a
# chunked training step holds a gradient sum beside each chunk's gradients, so splitting
# saves memory only where the batch's activations outweigh the parameters. Their batches
# and images are sized so that they do (as in real training, where koila is needed), which
# lets a budget force several chunks; the small models use batch 8 and 32x32 images.
MODELS = {
    "resnet18": (lambda: tvm.resnet18(num_classes=CLASSES), images(32, 96)),
    "mobilenet_v2": (lambda: tvm.mobilenet_v2(num_classes=CLASSES), images(32, 64)),
    "mobilenet_v3_small": (lambda: tvm.mobilenet_v3_small(num_classes=CLASSES), images(32, 64)),
    "efficientnet_b0": (lambda: tvm.efficientnet_b0(num_classes=CLASSES), images(32, 64)),
    "densenet_small": (lambda: tvm.DenseNet(growth_rate=8, block_config=(2, 2, 2), num_init_features=16,
                                            num_classes=CLASSES), images(8, 32)),
    "vit_small": (vit_small, images(8, 32)),
    "convnext_small": (convnext_small, images(8, 32)),
    # torchvision's own convnext_tiny (28 M parameters), at 64x64: issue 50's one-sample chunks
    # ran out of memory under a plan that said they fit. No stochastic depth, so that chunks
    # and PyTorch's reference draw nothing.
    "convnext_tiny": (lambda: tvm.convnext_tiny(num_classes=CLASSES, stochastic_depth_prob=0.0), images(8, 64)),
    "swin_small": (swin_small, images(8, 32)),
    "transformer_encoder": (TransformerClassifier, sequences(8)),
    "lstm": (LSTMClassifier, sequences(8)),
    "gru": (GRUClassifier, sequences(8)),
    "embedding": (EmbeddingClassifier, tokens(16)),
    # Issue 28's norms and convolutions: GroupNorm, transposed, grouped and dilated
    # convolutions, bilinear upsampling.
    "unet_small": (UNetSmall, images(8, 32)),
    "conv1d_net": (Conv1dNet, sequences(8)),
    # Several results (koila_module_forward_all); the loss sums one term per result (LOSSES).
    "multitask": (MultiTask, images(16, 32)),
    "lstm_full": (LSTMFull, sequences(8)),
}

# The loss of a model from its results (flattened as torch.utils._pytree does): the sum over
# them of each one's mean cross entropy against the targets (cross_entropy_mean, results
# that are logits), or of each one's mean square (squares_mean).
LOSSES = {"lstm_full": "squares_mean"}


def loss_rule(name):
    return LOSSES.get(name, "cross_entropy_mean")


def loss_of(rule, results, y):
    terms = [F.cross_entropy(r, y, reduction="mean") if rule == "cross_entropy_mean" else (r * r).mean()
             for r in results]
    return sum(terms[1:], terms[0])

BATCH_NORM = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def zero_dropout(model):
    """Every dropout probability (dropout layers, stochastic depth, attention and RNN
    dropout) set to 0, so that chunked and unsplit runs compute the same function."""
    for m in model.modules():
        if isinstance(m, (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, StochasticDepth)):
            m.p = 0.0
        if isinstance(m, (nn.MultiheadAttention, nn.RNNBase)):
            m.dropout = 0.0
        for attr in ("attention_dropout", "dropout"):  # torchvision's Swin attention keeps floats
            if isinstance(getattr(m, attr, None), float):
                setattr(m, attr, 0.0)


def export_program(model, example, mode, path):
    """torch.export (PyTorch 2.x) of the model in `mode` with a dynamic batch dim, saved to
    `path`; checked to compute the logits the model computes. Returns None, or why the
    model does not export (printed; the manifest then lists no program for that mode)."""
    if not hasattr(torch, "export") or not hasattr(torch.export, "save"):
        return "this PyTorch has no torch.export"
    m = copy.deepcopy(model)
    m.train(mode == "train")
    try:
        ep = torch.export.export(m, (example,), dynamic_shapes=({0: torch.export.Dim("batch")},))
        torch.export.save(ep, path)
        program = torch.export.load(path).module()
    except Exception as e:  # noqa: BLE001 - a model torch.export refuses is left out, saying why
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    with torch.no_grad():  # on copies: train mode moves batch-norm statistics
        want, got = tree_flatten(copy.deepcopy(m)(example))[0], tree_flatten(program(example))[0]
    if len(got) != len(want) or not all(torch.allclose(g, w, rtol=1e-4, atol=1e-5) for g, w in zip(got, want)):
        os.remove(path)
        diff = max((g - w).abs().max().item() for g, w in zip(got, want)) if len(got) == len(want) else float("nan")
        return f"the exported program computes other results (max diff {diff:.3g})"
    return None


def export(model, example):
    """TorchScript by scripting; by tracing where scripting fails."""
    try:
        return torch.jit.script(model), "script"
    except Exception as e:  # noqa: BLE001 - any scripting failure falls back to tracing
        print(f"make_corpus.py: scripting {type(model).__name__} failed, tracing it ({str(e).splitlines()[0]})")
        return torch.jit.trace(model, example, check_trace=False), "trace"


class Reference(nn.Module):
    """The reference data as buffers of a scripted module: LibTorch C++ reads it with
    torch::jit::load and named_buffers(), in registration order."""

    def __init__(self, tensors):
        super().__init__()
        for name, t in tensors:
            self.register_buffer(name, t.detach().clone().contiguous())

    def forward(self) -> torch.Tensor:
        return self.input


def grad_name(param_name):
    return "grad__" + param_name.replace(".", "__")


def run(module, x, y, train, rule="cross_entropy_mean"):
    """Logits (the first result), loss and the parameters' gradients of one full-batch step
    in the given mode."""
    module.train(train)
    for p in module.parameters():
        p.grad = None
    results = tree_flatten(module(x))[0]
    logits = results[0]
    loss = loss_of(rule, results, y)
    loss.backward()
    grads = [(n, p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in module.named_parameters()]
    for p in module.parameters():
        p.grad = None
    return logits.detach(), loss.detach(), grads


def chunks_of_one_distance(module, x, y, train, rule, grads):
    """How far PyTorch's own gradient accumulation over chunks of one sample (each chunk's
    loss weighted by its share of the batch) lands from its full-batch gradients `grads`: the
    largest over the parameters of max |difference| / max |full-batch gradient|. Backends
    choose other kernels for one sample (oneDNN's convolutions on some CPUs round far more
    than the sums do), so this, not a constant, is what koila's chunks of one are held to.
    In the reference's mode (a train-mode batch norm couples the batch: never in chunks of one)."""
    module.train(train)
    for p in module.parameters():
        p.grad = None
    batch = x.shape[0]
    for i in range(batch):
        (loss_of(rule, tree_flatten(module(x[i:i + 1]))[0], y[i:i + 1]) / batch).backward()
    worst = 0.0
    for (n, full), p in zip(grads, module.parameters()):
        scale = full.abs().max().item()
        if p.grad is not None and scale > 0:
            worst = max(worst, (p.grad - full).abs().max().item() / scale)
        p.grad = None
    return torch.tensor(worst, dtype=torch.float64)


def reference(path, x, y, train, rule, has_bn):
    """The reference buffers: PyTorch's float32 results from the saved TorchScript model
    (loaded afresh for each mode, since train mode updates batch-norm statistics), and where
    the model runs in chunks of one (eval mode, or no batch norm) PyTorch's own distance for
    them (chunks_of_one_distance)."""
    logits, loss, grads = run(torch.jit.load(path), x, y, train, rule)
    zero = [n for n, g in grads if not g.abs().max() > 0]
    assert not zero, f"{path}: no gradient reaches {', '.join(zero)}"
    out = [("input", x), ("target", y), ("logits", logits), ("loss", loss)] + [(grad_name(n), g) for n, g in grads]
    if not (train and has_bn):
        out.append(("chunks_of_one_distance", chunks_of_one_distance(torch.jit.load(path), x, y, train, rule, grads)))
    return out


def stat_name(module_name, buffer):
    return "stat__" + (module_name + "." + buffer).replace(".", "__")


def chunked_step(model, x, y, chunk, dtype):
    """Train-mode logits, loss and gradients of `model` (a copy, in `dtype`) with the batch
    in chunks of `chunk` samples, each chunk's mean cross entropy weighted by its share of
    the batch, as gradient accumulation does; also each batch-norm layer's inputs, chunk by
    chunk (float64), and the layers' buffers before the step."""
    m = copy.deepcopy(model).to(dtype)
    m.train()
    layers = [(n, b) for n, b in m.named_modules() if isinstance(b, BATCH_NORM) and b.track_running_stats]
    before = {n: (b.running_mean.clone(), b.running_var.clone(), b.num_batches_tracked.clone(), b.momentum)
              for n, b in layers}
    seen = {n: [] for n, _ in layers}
    hooks = [b.register_forward_pre_hook(lambda _, args, n=n: seen[n].append(args[0].detach().double()))
             for n, b in layers]
    batch = x.shape[0]
    xs = x.to(dtype) if x.is_floating_point() else x
    logits, loss = [], torch.zeros((), dtype=torch.float64)
    for start in range(0, batch, chunk):
        out = m(xs[start:start + chunk])
        part = F.cross_entropy(out, y[start:start + chunk], reduction="mean") * (out.shape[0] / batch)
        part.backward()
        logits.append(out.detach())
        loss += part.detach().double()
    for h in hooks:
        h.remove()
    grads = [(n, p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in m.named_parameters()]
    return torch.cat(logits), loss, grads, seen, before


def per_chunk_reference(model, x, y, chunk):
    """The reference for KOILA_BATCH_STATS_PER_CHUNK, computed by PyTorch with the batch in
    chunks of `chunk` samples in train mode (see chunked_step):
      - logits, loss and gradients in float64, and PyTorch's own float32 error against
        them (err_logits, errgrad__P: max |float32 - float64|). Normalizing a chunk with
        its own statistics can be ill-conditioned (few values per channel: mobilenet_v2's
        float32 gradients are about 1% off float64 in chunks of 8), so koila is held to
        PyTorch's own float32 accuracy;
      - the batch-norm buffers after one update with the statistics of the whole batch each
        layer saw (its float32 inputs over all chunks, concatenated, in float64: mean and
        unbiased variance), num_batches_tracked counting one."""
    logits32, _, grads32, seen, before = chunked_step(model, x, y, chunk, torch.float32)
    logits, loss, grads, _, _ = chunked_step(model, x, y, chunk, torch.float64)
    chunks = (x.shape[0] + chunk - 1) // chunk
    stats = []
    for n, inputs in seen.items():
        assert len(inputs) == chunks, f"{n} ran {len(inputs)} times in {chunks} chunks (once per chunk expected)"
        whole = torch.cat(inputs)
        dims = [d for d in range(whole.dim()) if d != 1]
        mean, var = whole.mean(dims), whole.var(dims, unbiased=True)
        rm, rv, tracked, momentum = before[n]
        factor = momentum if momentum is not None else 1.0 / float(tracked.item() + 1)
        stats += [(stat_name(n, "running_mean"), ((1 - factor) * rm.double() + factor * mean).float()),
                  (stat_name(n, "running_var"), ((1 - factor) * rv.double() + factor * var).float()),
                  (stat_name(n, "num_batches_tracked"), tracked + 1)]
    errors = [("err_logits", (logits32.double() - logits).abs().max())]
    errors += [("err" + grad_name(n), (g32.double() - g).abs().max()) for (n, g32), (_, g) in zip(grads32, grads)]
    return ([("input", x), ("target", y), ("logits", logits), ("loss", loss),
             ("chunk", torch.tensor([chunk], dtype=torch.int64))] +
            [(grad_name(n), g) for n, g in grads] + stats + errors)


def save_reference(tensors, path):
    scripted = torch.jit.script(Reference(tensors))
    scripted.save(path)
    # Round trip: what C++ will read is what was computed.
    loaded = dict(torch.jit.load(path).named_buffers())
    assert list(loaded) == [n for n, _ in tensors], f"{path}: buffer order changed"
    for name, t in tensors:
        assert torch.equal(loaded[name], t.detach()), f"{path}: buffer {name} changed in the round trip"


def make(name, out_dir):
    construct, make_input = MODELS[name]
    seed = 1000 + list(MODELS).index(name)
    torch.manual_seed(seed)
    model = construct()
    zero_dropout(model)
    x = make_input()
    y = torch.randint(CLASSES, (x.shape[0],), dtype=torch.int64)
    has_bn = any(isinstance(m, BATCH_NORM) for m in model.modules())
    if has_bn:  # warm the running statistics, so that eval mode is not the identity
        model.train()
        with torch.no_grad():
            for _ in range(2):
                model(make_input())
    model.train()
    scripted, how = export(model, x)
    # Determinism check: with dropout off two runs agree exactly.
    with torch.no_grad():
        probe = copy.deepcopy(scripted)
        a, b = tree_flatten(probe(x))[0], tree_flatten(probe(x))[0]
        assert all(torch.equal(u, v) for u, v in zip(a, b)), f"{name}: two runs differ (dropout left on?)"
        results = len(a)
    scripted.save(os.path.join(out_dir, name + ".pt"))

    modes = ["train"]
    if has_bn:
        modes.append("eval")
    for mode in modes:
        save_reference(reference(os.path.join(out_dir, name + ".pt"), x, y, (mode == "train"), loss_rule(name), has_bn),
                       os.path.join(out_dir, f"{name}.{mode}.ref.pt"))

    if has_bn:  # batch norm per chunk (koila_set_batch_stats): 4 chunks
        save_reference(per_chunk_reference(model, x, y, x.shape[0] // 4),
                       os.path.join(out_dir, f"{name}.per_chunk.ref.pt"))

    # The same model as torch.export programs, one per module mode (PyTorch 2.x only).
    programs = []
    for mode in modes:
        why = export_program(model, x, mode, os.path.join(out_dir, f"{name}.{mode}.pt2"))
        if why is None:
            programs.append(mode)
        elif hasattr(torch, "export"):
            print(f"make_corpus.py: {name} in {mode} mode does not export: {why}")

    params = sum(p.numel() for p in scripted.parameters())
    shape = "x".join(str(d) for d in x.shape)
    dtype = "int64" if x.dtype == torch.int64 else "float32"
    return (f"{name} input={shape} dtype={dtype} classes={CLASSES} loss={loss_rule(name)} "
            f"batchnorm={int(has_bn)} export={how} modes={','.join(modes)} params={params}"
            + (f" results={results}" if results > 1 else "") + (f" pt2={','.join(programs)}" if programs else ""))


# ---- Cache ----------------------------------------------------------------------------
#
# Writing the corpus takes minutes of CPU, and the test command writes it twice (one per
# LibTorch) on every clean clone. What it writes depends only on this script and the
# versions of Python, torch and torchvision (everything is seeded), so a corpus once written
# is kept under ~/.cache/koila/corpus/KEY ($XDG_CACHE_HOME, or $KOILA_CORPUS_CACHE; "off"
# keeps none) and copied from there while the key holds. The newest few are kept.

CACHE_KEEP = 4


def cache_entry():
    root = os.environ.get("KOILA_CORPUS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "koila", "corpus")
    if root == "off":
        return None
    key = hashlib.sha256()
    with open(os.path.abspath(__file__), "rb") as f:
        key.update(f.read())
    key.update(f"python {sys.version_info[:3]} torch {torch.__version__} "
               f"torchvision {torchvision.__version__}".encode())
    return os.path.join(root, key.hexdigest()[:20])


def copy_corpus(src, dst):
    """Every file of src into dst, manifest.txt last (its presence means complete)."""
    os.makedirs(dst, exist_ok=True)
    names = sorted(n for n in os.listdir(src) if n != "manifest.txt")
    for n in names + ["manifest.txt"]:
        shutil.copyfile(os.path.join(src, n), os.path.join(dst, n))


def from_cache(entry, out_dir):
    if entry is None or not os.path.isfile(os.path.join(entry, "manifest.txt")):
        return False
    try:
        copy_corpus(entry, out_dir)
        os.utime(entry)  # most recently used
    except OSError as e:
        print(f"make_corpus.py: the cached corpus {entry} cannot be copied ({e}); writing it anew")
        return False
    print(f"make_corpus.py: copied from {entry} (written earlier by this script with these versions)")
    return True


def to_cache(entry, out_dir):
    if entry is None:
        return
    root = os.path.dirname(entry)
    partial = f"{entry}.{os.getpid()}.partial"
    try:
        os.makedirs(root, exist_ok=True)
        copy_corpus(out_dir, partial)
        if os.path.isdir(entry):
            shutil.rmtree(entry)
        os.rename(partial, entry)
        kept = sorted((os.path.join(root, n) for n in os.listdir(root) if not n.endswith(".partial")),
                      key=os.path.getmtime, reverse=True)
        for old in kept[CACHE_KEEP:]:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as e:  # a cache that cannot be written costs only time
        print(f"make_corpus.py: not cached in {root} ({e})")
        shutil.rmtree(partial, ignore_errors=True)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_corpus.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    entry = cache_entry()
    if from_cache(entry, out_dir):
        return
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    start = time.time()
    lines = []
    for name in MODELS:
        t = time.time()
        lines.append(make(name, out_dir))
        print(f"make_corpus.py: {lines[-1]} ({time.time() - t:.1f} s)")
    # The manifest last: its presence means the corpus is complete.
    manifest = os.path.join(out_dir, "manifest.txt")
    with open(manifest + ".tmp", "w") as f:
        f.write(MANIFEST_HEADER % (torch.__version__, torchvision.__version__))
        f.write("\n".join(lines) + "\n")
    os.replace(manifest + ".tmp", manifest)
    print(f"make_corpus.py: {len(lines)} models in {out_dir} ({time.time() - start:.1f} s)")
    to_cache(entry, out_dir)


if __name__ == "__main__":
    main()
