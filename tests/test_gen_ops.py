#!/usr/bin/env python3
"""ctest c.gen_ops_selftest: scripts/gen_ops.py refuses bad operator tables with a message that
names the fault (exit 2, nothing written), and its --check fails on a stale generated file."""
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEN = ROOT / "scripts" / "gen_ops.py"
sys.path.insert(0, str(GEN.parent))
import gen_ops  # noqa: E402 (what it writes, for the copy below)

GROUP = '[[group]]\nid = "unary"\nc_doc = "Unary."\nengine = "pointwise"\n\n'
OP = '[[op]]\nname = "{name}"\ngroup = "{group}"\nargs = "{args}"\ndoc = "d"\n{extra}\n'

BAD = {
    "an unknown argument type": (OP.format(name="trace", group="unary", args="matrix x", extra=""),
                                 "trace: argument 'matrix x' not understood"),
    "an unknown group": (OP.format(name="neg", group="nowhere", args="tensor x", extra=""),
                         "neg: unknown group 'nowhere'"),
    "an op described twice": (OP.format(name="neg", group="unary", args="tensor x", extra="") * 2,
                              "neg: described twice"),
    "a family without a reference": (OP.format(name="neg", group="unary", args="tensor x", extra='family = "unary"'),
                                     "neg: an op of a family needs a reference"),
    "a decode order that misses an argument": (
        OP.format(name="clamp", group="unary", args="tensor x, double lo", extra='decode = ["x"]'),
        "clamp: decode must list every argument once"),
    "an array without its count": (OP.format(name="sum", group="unary", args="tensor x, dims d", extra=""),
                                   "sum: argument 'd': a count goes with tensors, ints, dims and shape only"),
    "a check placed nowhere": (
        OP.format(name="neg", group="unary", args="tensor x", extra='checks = [{ after = "y", code = "f();" }]'),
        "neg: a check needs `after` or `before` an argument, and `code`"),
    "a TOML syntax error": ("[[op]\n", "gen_ops: "),
}


def run(*args):
    return subprocess.run([sys.executable, str(GEN), *args], capture_output=True, text=True)


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for what, (body, expected) in BAD.items():
            table = tmp / "table.toml"
            table.write_text(GROUP + body)
            r = run("--check", "--table", str(table))
            if r.returncode != 2 or expected not in r.stderr or "Traceback" in r.stderr:
                failures.append(f"{what}: rc {r.returncode}, stderr {r.stderr.strip()!r}")
        # A copy of the generated files with one edited by hand: --check names it.
        copy = tmp / "repo"
        for path in ["scripts/gen_ops.py", gen_ops.TABLE, *gen_ops.outputs(ROOT)]:
            (copy / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / path, copy / path)
        r = run("--check", "--root", str(copy))
        if r.returncode != 0:
            failures.append(f"the committed files are stale: {r.stderr.strip()}")
        entries = copy / "src/api/op_entries.cpp"
        entries.write_text(entries.read_text().replace("ops::relu(", "ops::gelu("))
        r = run("--check", "--root", str(copy))
        if r.returncode != 1 or "src/api/op_entries.cpp" not in r.stderr:
            failures.append(f"an edited entry went unnoticed: rc {r.returncode}, {r.stderr.strip()!r}")
        r = run("--root", str(copy))  # writes it back
        if r.returncode != 0 or run("--check", "--root", str(copy)).returncode != 0:
            failures.append("regenerating did not restore the edited file")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(BAD) + 2 - len(failures)} of {len(BAD) + 2} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
