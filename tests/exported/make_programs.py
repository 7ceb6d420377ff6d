"""Writes the exported programs koila's exported-program tests load (tests/test_exported.cpp),
with PyTorch's own results for them. Run with a PyTorch 2.x that has torch.export:

    make_programs.py OUT_DIR

For each case NAME it writes
  NAME.pt2     torch.export.save of the model exported with a dynamic batch dim (or, for
               the *_fixed cases, without), in the mode the case names;
  NAME.ref.pt  torch.save of a dict, in this order:
                 input, target   the batch and its int64 class indices
                 logits          model(input) (the first result for models with several)
                 loss            the loss the manifest's loss= names (loss_of): the mean
                                 cross entropy of the logits and target, or for several
                                 results the sum over them of that or of their mean squares
                 result0, ...    every result, flattened as torch.utils._pytree does
                 grad__P         d loss / d P for each parameter P in named_parameters()
                                 order ('.' written '__')
                 buffer__B       each buffer B after that step (batch norm's running
                                 statistics move in training mode)
               computed by PyTorch on the model itself, eagerly, whole batch (the program,
               saved and loaded back, is checked to compute the same logits);
  dropout_encoder.pt2  a program with dropout for the seeded-run tests (make_seeded)
  MANIFEST     one line per case: NAME mode=train|eval batch=dynamic|fixed outputs=N
               loss=ce_each|squares.
The programs are small (a few KiB of weights): the tests load them on every LibTorch koila
builds against, and the committed copies (tests/data/exported/<torch version>/) are what a
LibTorch without torch.export (1.13) is tested on.
"""
import copy
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten

CLASSES = 5


class ConvBN(nn.Module):
    """conv, batch norm, relu, flatten, linear: buffers and a mode-dependent operator."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 6 * 6, CLASSES)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


class Mlp(nn.Module):
    """A view by the batch size (aten.sym_size, a symbolic list) and dropout (p = 0)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(12, 64)
        self.drop = nn.Dropout(0.0)
        self.b = nn.Linear(64, CLASSES)

    def forward(self, x):
        h = x.view(x.size(0), -1)
        return self.b(self.drop(torch.tanh(self.a(h))))


class LstmClassifier(nn.Module):
    """A two-layer LSTM (aten.lstm with zeros made on the export device), last step."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, batch_first=True)
        self.fc = nn.Linear(6, CLASSES)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(out[:, -1])


class Attention(nn.Module):
    """A transformer encoder layer: scaled_dot_product_attention (PyTorch 2.0 and later)."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.fc = nn.Linear(8, CLASSES)

    def forward(self, x):
        return self.fc(self.layer(x).mean(1))


class Tied(nn.Module):
    """An embedding whose weight the output layer shares."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(CLASSES, 6)
        self.out = nn.Linear(6, CLASSES, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, tokens):
        return self.out(torch.tanh(self.emb(tokens).mean(1)))


class Heads(nn.Module):
    """A dict of two heads over one trunk: several results (koila_module_forward_all)."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(12, 16)
        self.cls = nn.Linear(16, CLASSES)
        self.aux = nn.Linear(16, CLASSES)

    def forward(self, x):
        h = torch.tanh(self.trunk(x.flatten(1)))
        return {"cls": self.cls(h), "aux": self.aux(h)}


class LstmFull(nn.Module):
    """An LSTM's whole return, (output, (h, c)): h and c carry the batch in dim 1."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, batch_first=True)

    def forward(self, x):
        return self.lstm(x)


def conv_input(n):
    return torch.randn(n, 3, 6, 6)


CASES = {
    # name: (model, input maker, batch, mode, dynamic batch)
    "convbn_train": (ConvBN, conv_input, 8, "train", True),
    "convbn_eval": (ConvBN, conv_input, 8, "eval", True),
    # A batch whose activations outweigh the weights, so that splitting it pays.
    "mlp": (Mlp, lambda n: torch.randn(n, 3, 4), 64, "train", True),
    "mlp_fixed": (Mlp, lambda n: torch.randn(n, 3, 4), 64, "train", False),
    "lstm": (LstmClassifier, lambda n: torch.randn(n, 5, 4), 8, "train", True),
    "attention": (Attention, lambda n: torch.randn(n, 4, 8), 8, "train", True),
    "tied": (Tied, lambda n: torch.randint(CLASSES, (n, 3)), 8, "train", True),
    # Several results; the loss sums one term per result (loss_of).
    "heads": (Heads, lambda n: torch.randn(n, 3, 4), 16, "train", True),
    "lstm_full": (LstmFull, lambda n: torch.randn(n, 5, 4), 8, "train", True),
}

# The loss of a case from its results (flattened) and targets, summed over the results: the
# mean cross entropy of each ("ce_each", results that are logits), or the mean of each one's
# squares ("squares").
def loss_of(name, results, y):
    rule = {"heads": "ce_each", "lstm_full": "squares"}.get(name, "ce_each")
    terms = [F.cross_entropy(r, y) if rule == "ce_each" else (r * r).mean() for r in results]
    return sum(terms[1:], terms[0]), rule


def grad_name(n):
    return "grad__" + n.replace(".", "__")


def make(name, out_dir):
    construct, make_input, batch, mode, dynamic = CASES[name]
    torch.manual_seed(2000 + list(CASES).index(name))
    model = construct()
    if any(isinstance(m, nn.BatchNorm2d) for m in model.modules()):
        model.train()
        with torch.no_grad():  # running statistics that are not the identity
            for _ in range(2):
                model(make_input(batch))
    model.train(mode == "train")
    x = make_input(batch)
    y = torch.randint(CLASSES, (batch,))
    eager = copy.deepcopy(model)
    shapes = ({0: torch.export.Dim("batch")},) if dynamic else None
    ep = torch.export.export(model, (x,), dynamic_shapes=shapes)
    path = os.path.join(out_dir, name + ".pt2")
    torch.export.save(ep, path)

    # The reference: the model itself, eagerly (its tied weights one parameter, whose
    # gradient sums both uses; torch.export.load(...).module() unties them). The program
    # as saved and loaded back must compute the same logits.
    results = tree_flatten(eager(x))[0]
    with torch.no_grad():
        again = tree_flatten(torch.export.load(path).module()(x))[0]
    assert len(again) == len(results) and all(torch.allclose(a, r, atol=1e-6) for a, r in zip(again, results)), \
        f"{name}: the saved program computes other results"
    loss, rule = loss_of(name, results, y)
    loss.backward()
    ref = {"input": x, "target": y, "logits": results[0].detach(), "loss": loss.detach()}
    for k, r in enumerate(results):
        ref[f"result{k}"] = r.detach()
    for n, p in eager.named_parameters():
        ref[grad_name(n)] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
    for n, b in eager.named_buffers():
        ref["buffer__" + n.replace(".", "__")] = b.detach().clone()
    torch.save(ref, os.path.join(out_dir, name + ".ref.pt"))
    return f"{name} mode={mode} batch={'dynamic' if dynamic else 'fixed'} outputs={len(results)} loss={rule}"


class DropoutBlock(nn.Module):
    """An encoder block with dropout on the attention weights, the feed-forward layer and both
    residual branches (as nn.TransformerEncoderLayer(dropout=0.2) has, its attention written
    out: LibTorch 1.13 has no scaled_dot_product_attention)."""

    def __init__(self, width, hidden, p=0.2):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.norm1 = nn.LayerNorm(width)
        self.ff1 = nn.Linear(width, hidden)
        self.ff2 = nn.Linear(hidden, width)
        self.norm2 = nn.LayerNorm(width)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        a = self.drop(torch.softmax(q @ k.transpose(1, 2) / q.size(-1) ** 0.5, dim=-1))
        h = self.norm1(x + self.drop(a @ v))
        return self.norm2(h + self.drop(self.ff2(self.drop(torch.relu(self.ff1(h))))))


class DropoutEncoder(nn.Module):
    """Three DropoutBlocks in training mode, for the seeded-run tests: no reference, no
    MANIFEST line (its gradients depend on the masks drawn)."""

    def __init__(self, width=32, hidden=128):
        super().__init__()
        self.blocks = nn.Sequential(*[DropoutBlock(width, hidden) for _ in range(3)])
        self.fc = nn.Linear(width, CLASSES)

    def forward(self, x):
        return self.fc(self.blocks(x).mean(1))


def make_seeded(out_dir):
    """dropout_encoder.pt2 (tests/test_seeded.cpp): input [batch, 128, 32], dynamic batch."""
    torch.manual_seed(1999)
    model = DropoutEncoder().train()
    x = torch.randn(8, 128, 32)
    ep = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(ep, os.path.join(out_dir, "dropout_encoder.pt2"))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_programs.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    lines = [make(name, out_dir) for name in CASES]
    make_seeded(out_dir)
    with open(os.path.join(out_dir, "MANIFEST"), "w") as f:
        f.write(f"# torch {torch.__version__}\n" + "\n".join(lines) + "\n")
    print(f"make_programs.py: {len(lines)} programs in {out_dir} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
