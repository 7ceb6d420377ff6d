"""The final parameters of two runs of examples/train_ddp.c (their final.pt), as PyTorch loads
them: equal within TOLERANCE of each parameter's largest magnitude (exit 0), or not (exit 1).
Used by the launcher tests (common.sh) and by scripts/gpu_check.sh.

usage: compare_final.py A/final.pt B/final.pt TOLERANCE"""
import sys
import warnings

warnings.simplefilter("ignore")
import torch  # noqa: E402

a, b = (dict(torch.jit.load(p, map_location="cpu").named_parameters()) for p in sys.argv[1:3])
tolerance = float(sys.argv[3])
worst = 0.0
for name, x in a.items():
    y = b[name]
    scale = max(x.abs().max().item(), 1e-6)
    worst = max(worst, (x - y).abs().max().item() / scale)
print(f"largest difference of {len(a)} parameters: {worst:.3g} of their largest magnitude")
sys.exit(0 if worst <= tolerance else 1)
