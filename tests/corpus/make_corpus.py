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
                         logits       model(input) in that mode
                         loss         mean cross entropy of logits and target (a scalar)
                         grad__P      d loss / d P for each parameter P, in
                                      named_parameters() order ('.' written '__')
                       computed by PyTorch on the whole batch;
and last manifest.txt, one line per model (see MANIFEST_HEADER).

Batch-norm models are saved with running statistics warmed by a few training-mode passes,
so that eval mode is not the identity. Each reference is computed on a fresh load of the
saved model (train mode updates batch-norm statistics). Initializations that would stop
gradients (ViT's zero head, ConvNeXt's 1e-6 layer scale) are changed, so that every
parameter's gradient is compared.

Everything is seeded (torch.manual_seed per model), so two runs write the same numbers.
"""

import copy
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import torchvision
    from torchvision import models as tvm
    from torchvision.ops import StochasticDepth
except ImportError as e:  # pragma: no cover - reported to CMake
    sys.exit(f"make_corpus.py: torchvision is missing ({e}); scripts/setup.sh installs python3-torchvision")

CLASSES = 10
IMAGE_CHANNELS = 3
SEQ, FEATURES = 16, 16
VOCAB, TOKENS = 200, 32

MANIFEST_HEADER = (
    "# koila real-model corpus, written by tests/corpus/make_corpus.py (torch %s, torchvision %s)\n"
    "# name input=BxCx.. dtype=float32|int64 classes=N loss=cross_entropy_mean batchnorm=0|1 "
    "export=script|trace modes=train[,eval] params=N\n"
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
    "swin_small": (swin_small, images(8, 32)),
    "transformer_encoder": (TransformerClassifier, sequences(8)),
    "lstm": (LSTMClassifier, sequences(8)),
    "gru": (GRUClassifier, sequences(8)),
    "embedding": (EmbeddingClassifier, tokens(16)),
}

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


def run(module, x, y, train):
    """Logits, loss and the parameters' gradients of one full-batch step in the given mode."""
    module.train(train)
    for p in module.parameters():
        p.grad = None
    logits = module(x)
    loss = F.cross_entropy(logits, y, reduction="mean")
    loss.backward()
    grads = [(n, p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in module.named_parameters()]
    for p in module.parameters():
        p.grad = None
    return logits.detach(), loss.detach(), grads


def reference(path, x, y, train):
    """The reference buffers: PyTorch's float32 results from the saved TorchScript model
    (loaded afresh for each mode, since train mode updates batch-norm statistics)."""
    logits, loss, grads = run(torch.jit.load(path), x, y, train)
    zero = [n for n, g in grads if not g.abs().max() > 0]
    assert not zero, f"{path}: no gradient reaches {', '.join(zero)}"
    return [("input", x), ("target", y), ("logits", logits), ("loss", loss)] + [(grad_name(n), g) for n, g in grads]


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
        a, b = probe(x), probe(x)
        assert torch.equal(a, b), f"{name}: two runs differ (dropout left on?)"
    scripted.save(os.path.join(out_dir, name + ".pt"))

    modes = ["train"]
    if has_bn:
        modes.append("eval")
    for mode in modes:
        save_reference(reference(os.path.join(out_dir, name + ".pt"), x, y, train=(mode == "train")),
                       os.path.join(out_dir, f"{name}.{mode}.ref.pt"))

    params = sum(p.numel() for p in scripted.parameters())
    shape = "x".join(str(d) for d in x.shape)
    dtype = "int64" if x.dtype == torch.int64 else "float32"
    return (f"{name} input={shape} dtype={dtype} classes={CLASSES} loss=cross_entropy_mean "
            f"batchnorm={int(has_bn)} export={how} modes={','.join(modes)} params={params}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_corpus.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
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


if __name__ == "__main__":
    main()
