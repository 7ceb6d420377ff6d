"""Checks a program koila saved (koila_module_save of an exported program) with PyTorch:
torch.export.load reads it, its state dict holds exactly the tensors koila wrote in
EXPECTED (torch.save of a dict name -> tensor, from tests/test_exported.cpp), and the
loaded program runs on INPUT (a torch.save'd tensor).

usage: check_saved.py SAVED.pt2 EXPECTED.pt INPUT.pt
Exits 0 when all holds, 1 with the first difference otherwise."""
import sys

import torch
from torch.utils._pytree import tree_flatten


def main():
    saved, expected, example = sys.argv[1:4]
    ep = torch.export.load(saved)
    want = torch.load(expected, weights_only=False)  # written by the test itself (torch::pickle_save)
    state = ep.state_dict
    for name, tensor in want.items():
        if name not in state:
            sys.exit(f"check_saved.py: {saved} has no {name} (it has {sorted(state)})")
        if not torch.equal(state[name].detach(), tensor):
            diff = (state[name].detach().double() - tensor.double()).abs().max().item()
            sys.exit(f"check_saved.py: {name} differs from what koila held by {diff}")
    with torch.no_grad():
        out = ep.module()(torch.load(example, weights_only=False))
    shapes = [tuple(t.shape) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    print(f"check_saved.py: {len(want)} tensors equal; the program runs ({', '.join(map(str, shapes))})")


if __name__ == "__main__":
    main()
