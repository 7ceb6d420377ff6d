"""Rewrites a corpus's references with PyTorch's own results on a GPU, for koila's corpus
tests run on that GPU (scripts/gpu_check.sh): a GPU's gradients are compared with PyTorch's
on the same GPU, not with the CPU's (the GPU's arithmetic differs from the CPU's by more than
koila's chunking does).

    gpu_references.py CORPUS_DIR OUT_DIR [DEVICE]     (default cuda:0)

OUT_DIR gets a copy of CORPUS_DIR whose NAME.MODE.ref.pt hold the same inputs and targets and
PyTorch's logits, loss and gradients from the saved TorchScript model on DEVICE, with TF32 off
in cuDNN and cuBLAS (as the corpus tests run). The per-chunk batch-norm references stay the
CPU's."""
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_corpus  # noqa: E402


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    device = torch.device(sys.argv[3] if len(sys.argv) == 4 else "cuda:0")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    # PyTorch 2.9 and later: the precisions per op, which its kernels read.
    for setting in (getattr(torch.backends.cudnn, "conv", None), getattr(torch.backends.cudnn, "rnn", None),
                    torch.backends.cuda.matmul):
        if setting is not None and hasattr(setting, "fp32_precision"):
            setting.fp32_precision = "ieee"
    os.makedirs(dst, exist_ok=True)
    for n in os.listdir(src):
        shutil.copyfile(os.path.join(src, n), os.path.join(dst, n))
    for line in open(os.path.join(src, "manifest.txt")):
        if not line.strip() or line.startswith("#"):
            continue
        fields = dict(f.split("=", 1) for f in line.split()[1:])
        name = line.split()[0]
        for mode in fields["modes"].split(","):
            path = os.path.join(src, f"{name}.{mode}.ref.pt")
            cpu = dict(torch.jit.load(path).named_buffers())
            x, y = cpu["input"], cpu["target"]
            module = torch.jit.load(os.path.join(src, name + ".pt"), map_location=device)
            logits, loss, grads = make_corpus.run(module, x.to(device), y.to(device), mode == "train",
                                                  fields.get("loss", "cross_entropy_mean"))
            tensors = [("input", x), ("target", y), ("logits", logits.cpu()), ("loss", loss.cpu())]
            tensors += [(make_corpus.grad_name(n), g.cpu()) for n, g in grads]
            make_corpus.save_reference(tensors, os.path.join(dst, f"{name}.{mode}.ref.pt"))
            print(f"gpu_references.py: {name} ({mode}) on {device}: loss {loss.item():.6f} "
                  f"(CPU {cpu['loss'].item():.6f})", flush=True)


if __name__ == "__main__":
    main()
