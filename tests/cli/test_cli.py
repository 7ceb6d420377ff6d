#!/usr/bin/env python3
"""Tests of the koila command (tools/koila) on models of the real-model corpus.

usage: test_cli.py --koila BIN --corpus DIR --work DIR CASE

CASE is one of: plan_text, plan_json, svg, fit, recompute, forward_int_input, exported, errors, help. Each runs
the command as a user would and checks what it prints: figures against each other (the
parts of the memory add up to the plan's peak, the timeline's peak is the plan's), the
fit against koila's own plans and a measured run, and every error as one line.
"""

import argparse
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

VIT = ["--input", "3x32x32", "--mode", "training", "--loss", "cross_entropy:10", "--optimizer", "adam"]
FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("FAIL: " + message)


def run(args, koila, expect_rc=0):
    proc = subprocess.run([koila] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if expect_rc is not None and proc.returncode != expect_rc:
        print(proc.stdout)
        print(proc.stderr)
        sys.exit("koila %s: exit status %d, expected %d" % (" ".join(args), proc.returncode, expect_rc))
    return proc


def plan_json(a, extra):
    proc = run(["plan", os.path.join(a.corpus, "vit_small.pt")] + VIT + ["--json"] + extra, a.koila)
    return json.loads(proc.stdout)


def check_parts(report, label):
    parts = {p["part"]: p for p in report["memory"]}
    total = sum(p["bytes"] for p in report["memory"])
    check(total == report["peak_bytes"], "%s: the parts add up to %d, the plan's peak is %d" % (label, total, report["peak_bytes"]))
    for name, source in [("parameters", "exact"), ("inputs and targets", "exact"), ("optimizer state", "exact"),
                         ("activations kept for backward", "simulated"), ("temporaries", "simulated")]:
        check(name in parts, "%s: no part %r" % (label, name))
        if name in parts:
            check(parts[name]["source"] == source, "%s: %s comes from %s" % (label, name, parts[name]["source"]))
    # Adam keeps two moments per parameter.
    if "optimizer state" in parts and "parameters" in parts:
        check(parts["optimizer state"]["bytes"] == 2 * parts["parameters"]["bytes"], "%s: Adam's state is not 2x" % label)


def check_timeline(t, estimate, label):
    check(t["available"], "%s: no timeline (%s)" % (label, t.get("why_not")))
    if not t["available"]:
        return
    events = t["events"]
    peaks = [e["peak_bytes"] for e in events]
    check(max(peaks) == t["simulated_peak_bytes"], "%s: the largest event peak is not the timeline's peak" % label)
    check(peaks.index(max(peaks)) == t["peak_index"], "%s: the peak index is not the first largest" % label)
    check(t["estimated_peak_bytes"] == estimate,
          "%s: the timeline accounts for %d bytes, the plan estimates %d" % (label, t["estimated_peak_bytes"], estimate))
    check(t["simulated_peak_bytes"] <= estimate, "%s: simulated peak above the estimate" % label)
    check(all(e["live_bytes"] <= e["peak_bytes"] for e in events), "%s: an event holds more after than during" % label)
    phases = [e["phase"] for e in events]
    check(phases[0] == "forward" and "backward" in phases, "%s: phases %s..." % (label, phases[:3]))


def case_plan_text(a):
    proc = run(["plan", os.path.join(a.corpus, "vit_small.pt")] + VIT + ["--batch", "256", "--budget", "24MiB"], a.koila)
    out = proc.stdout
    print(out)
    for needle in ["batch      256", "plan       2 chunks of 128", "where the memory goes at the peak",
                   "parameters", "optimizer state", "activations kept for backward", "gradients", "temporaries",
                   "simulated", "exact", "total", "budget     24.0 MiB"]:
        check(needle in out, "plan text lacks %r" % needle)
    check(proc.stderr == "", "plan wrote to stderr: %r" % proc.stderr)


def case_plan_json(a):
    r = plan_json(a, ["--batch", "256", "--budget", "24MiB"])
    check(r["batch"] == 256 and r["chunk"] == 128 and r["chunks"] == 2, "plan: %s" % r["description"])
    check(r["budget_bytes"] == 24 << 20 and r["plan_budget_bytes"] == 24 << 20, "plan: the budget is not 24 MiB")
    check(r["peak_bytes"] <= r["budget_bytes"] and r["unsplit_peak_bytes"] > r["budget_bytes"], "plan: peaks vs budget")
    # The margin, said out loud and consistent with the verdict: the plan runs because its
    # need (estimate plus margin) fits, is split because the unsplit need does not, and the
    # description gives both.
    check(r["peak_bytes"] < r["needed_bytes"] <= r["budget_bytes"] < r["unsplit_needed_bytes"],
          "plan: needs vs budget: %s" % r["description"])
    check("koila's margin of 10%" in r["description"] and "needs a budget of" in r["description"],
          "the description does not state the margin: %s" % r["description"])
    check_parts(r, "chunked plan")
    check_timeline(r["timeline"], r["peak_bytes"], "chunked timeline")
    check_timeline(r["unsplit_timeline"], r["unsplit_peak_bytes"], "unsplit timeline")
    chunks = {e["chunk"] for e in r["timeline"]["events"]}
    check(chunks == {0, 1}, "the chunked timeline follows chunks %s, not the first two" % sorted(chunks))
    # A batch that fits: one chunk, and the plan's timeline is the unsplit one.
    small = plan_json(a, ["--batch", "64", "--budget", "24MiB"])
    check(small["chunks"] == 1 and small["fits_unsplit"], "batch 64 does not run unsplit: %s" % small["description"])
    check_parts(small, "unsplit plan")
    check(small["timeline"]["estimated_peak_bytes"] == small["unsplit_timeline"]["estimated_peak_bytes"],
          "an unsplit plan has two different timelines")


def case_svg(a):
    svg = os.path.join(a.work, "vit_small.svg")
    if os.path.exists(svg):
        os.remove(svg)
    r = plan_json(a, ["--batch", "256", "--budget", "24MiB", "--svg", svg])
    root = ET.parse(svg).getroot()  # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    check(root.tag == ns + "svg", "the root is %s" % root.tag)
    texts = ["".join(t.itertext()) for t in root.iter(ns + "text")]
    check(any(t.startswith("budget 24.0 MiB") for t in texts), "no budget label: %s" % texts)
    budget_lines = [l for l in root.iter(ns + "line") if l.get("class") == "budget"]
    check(len(budget_lines) == 2, "%d budget lines, expected one per panel" % len(budget_lines))
    for timeline in ("timeline", "unsplit_timeline"):
        op = r[timeline]["peak_op"]
        check(any(t.startswith("peak at " + op) for t in texts), "no label names the %s's peak op %s" % (timeline, op))
    check(len([p for p in root.iter(ns + "polyline")]) == 4, "expected a live and a peak curve per panel")
    check(not any(root.iter(ns + "image")) and "href" not in open(svg).read(), "the SVG refers to other files")


def case_fit(a):
    proc = run(["fit", os.path.join(a.corpus, "vit_small.pt")] + VIT + ["--batch", "1024", "--budget", "48MiB", "--verify", "--json"],
               a.koila)
    r = json.loads(proc.stdout)
    n = r["largest_unsplit_batch"]
    print("largest unsplit batch %d, peak %d, budget %d, measured %d" % (n, r["largest_unsplit_peak_bytes"], r["budget_bytes"],
                                                                          r["verify"]["measured_peak_bytes"]))
    tried = {t["batch"]: t for t in r["tried"]}
    check(n > 0 and tried[n]["fits_unsplit"], "the answer %d does not fit by koila's plan" % n)
    check(r["next_batch"]["batch"] == n + 1 and not r["next_batch"]["fits_unsplit"], "%d samples fit too" % (n + 1))
    check(all(t["fits_unsplit"] == (b <= n) for b, t in tried.items()), "plans disagree around the answer: %s" % r["tried"])
    check(r["largest_unsplit_peak_bytes"] <= r["budget_bytes"], "the answer's estimate is over the budget")
    # Answers consistent with the figures printed: each batch fits exactly when its need
    # (estimate with koila's margin) is within the budget.
    check(all(t["fits_unsplit"] == (0 < t["unsplit_needed_bytes"] <= r["budget_bytes"]) for t in tried.values()
              if t["unsplit_needed_bytes"]), "a verdict disagrees with its need: %s" % r["tried"])
    check(r["largest_unsplit_needed_bytes"] <= r["budget_bytes"] < r["next_batch"]["unsplit_needed_bytes"],
          "the answer's need or the next batch's does not bracket the budget")
    # Against reality: the answer, run once, stays within the budget, unsplit.
    check(r["verify"]["batch"] == n and r["verify"]["chunks"] == 1, "the verifying run was split: %s" % r["verify"])
    check(r["verify"]["measured_peak_bytes"] <= r["budget_bytes"], "the answer's run went over the budget")
    # ... as the plan made for it said (one chunk, the search's estimate), without a retry, and
    # measured within koila's margin of that estimate.
    v = r["verify"]
    check(v["planned_chunks"] == 1 and v["retries"] == 0, "the verifying run was not the one planned: %s" % v)
    check(v["estimated_peak_bytes"] == r["largest_unsplit_peak_bytes"], "the run's plan is not the search's: %s" % v)
    check(abs(v["measured_peak_bytes"] - v["estimated_peak_bytes"]) <= 0.1 * v["measured_peak_bytes"],
          "measured %d against the estimate %d" % (v["measured_peak_bytes"], v["estimated_peak_bytes"]))
    # Power of two: 1024 does not fit unsplit at 48 MiB; its chunk is the largest power of two that does.
    check(r["plan"]["chunks"] > 1 and r["largest_chunk"] == r["plan"]["chunk"], "batch 1024: %s" % r["plan"]["description"])
    check(r["largest_chunk"] & (r["largest_chunk"] - 1) == 0 and r["largest_chunk"] <= n, "chunk %d" % r["largest_chunk"])
    # Recomputing: never a smaller answer (a module call recomputed whole saves nothing, so the
    # same one here); with --recompute off, not searched.
    check(r["largest_unsplit_batch_recomputing"] is not None and r["largest_unsplit_batch_recomputing"] >= n,
          "recomputing, the largest batch is %s" % r["largest_unsplit_batch_recomputing"])
    off = json.loads(run(["fit", os.path.join(a.corpus, "vit_small.pt")] + VIT +
                         ["--batch", "1024", "--budget", "48MiB", "--recompute", "off", "--json"], a.koila).stdout)
    check(off["largest_unsplit_batch"] == n and off["largest_unsplit_batch_recomputing"] is None,
          "--recompute off: %s, %s" % (off["largest_unsplit_batch"], off["largest_unsplit_batch_recomputing"]))
    text = run(["fit", os.path.join(a.corpus, "vit_small.pt")] + VIT + ["--batch", "1024", "--budget", "48MiB"], a.koila).stdout
    print(text)
    check("largest batch that runs unsplit   %d" % n in text, "fit text lacks the answer %d" % n)
    check("largest chunk under the budget    %d" % r["largest_chunk"] in text, "fit text lacks the chunk")
    check("largest batch, recomputing" in text, "fit text lacks the largest batch recomputing")


def case_recompute(a):
    """A corpus model that fits only by recomputing: resnet18 in training, whose batch norm couples
    the batch (no split), under 90% of the unsplit need of 128 samples of 96x96. The text, the JSON (the C
    API's figures), the SVG and fit agree that the plan recomputes, and the plan drawn as fitting
    stays under its budget line."""
    model = os.path.join(a.corpus, "resnet18.pt")
    common = ["--input", "3x96x96", "--batch", "128", "--mode", "training", "--loss", "cross_entropy:10"]
    free = json.loads(run(["plan", model] + common + ["--budget", "64GiB", "--json"], a.koila).stdout)
    budget = int(free["unsplit_needed_bytes"] * 0.9)
    args = common + ["--budget", str(budget)]
    svg = os.path.join(a.work, "resnet18.svg")
    r = json.loads(run(["plan", model] + args + ["--json", "--svg", svg], a.koila).stdout)
    print(r["description"])
    check(r["chunks"] == 1 and r["recomputed_bytes"] > 0 and r["recomputes"] and not r["fits_unsplit"],
          "the plan does not say it recomputes: chunks %d, recomputed %d, fits_unsplit %s" %
          (r["chunks"], r["recomputed_bytes"], r["fits_unsplit"]))
    check("module call in segments of its own graph" in r["description"] and "a chunk frees" in r["description"],
          "the description: %s" % r["description"])
    check(r["peak_bytes"] <= r["needed_bytes"] <= r["budget_bytes"] < r["unsplit_needed_bytes"],
          "needs against the budget: %s" % r["description"])
    check_timeline(r["timeline"], r["peak_bytes"], "recomputing timeline")
    check(any(e["op"].endswith("(recomputed)") for e in r["timeline"]["events"]), "the timeline shows no op run again")
    check(r["timeline"]["estimated_peak_bytes"] != r["unsplit_timeline"]["estimated_peak_bytes"],
          "the plan's timeline is the one without recomputation")
    # The SVG draws the run that will happen first, fitting under the budget, then the batch
    # without recomputation, which does not fit.
    ns = "{http://www.w3.org/2000/svg}"
    root = ET.parse(svg).getroot()
    titles = ["".join(t.itertext()) for t in root.iter(ns + "text") if t.get("class") == "title"]
    check(len(titles) == 2 and "recomputing" in titles[0] and "fits" in titles[0] and
          "without recomputation" in titles[1] and "does not fit" in titles[1], "SVG titles: %s" % titles)
    check(not any("fits, as planned" in t for t in titles), "SVG titles: %s" % titles)
    budget_y = [float(l.get("y1")) for l in root.iter(ns + "line") if l.get("class") == "budget"]
    peaks = [p for p in root.iter(ns + "polyline") if p.get("class") == "peak"]
    if budget_y and peaks:
        top = min(float(xy.split(",")[1]) for xy in peaks[0].get("points").split())
        check(top >= budget_y[0], "the planned curve rises above its budget line (y %.1f against %.1f)" % (top, budget_y[0]))
    text = run(["plan", model] + args, a.koila).stdout
    check("plan       unsplit, recomputing" in text and "\nrecomputes " in text, "plan text:\n" + text)
    check("(the whole batch fits)" not in text, "plan text says the batch fits unsplit:\n" + text)
    fit = run(["fit", model] + args, a.koila).stdout
    print(fit)
    check("batch 128                         unsplit, recomputing" in fit, "fit text does not say batch 128 recomputes")
    check("KOILA_RECOMPUTE_OFF" not in fit, "fit names a setting nobody set:\n" + fit)
    off = run(["fit", model] + args + ["--recompute", "off"], a.koila, expect_rc=None).stdout
    check("batch 128" in off and "recomputing" not in off.split("batch 128", 1)[1].split("\n")[0],
          "--recompute off: batch 128 still recomputes:\n" + off)


def case_forward_int_input(a):
    proc = run(["plan", os.path.join(a.corpus, "embedding.pt"), "--input", "32:int64", "--batch", "64", "--json"], a.koila)
    r = json.loads(proc.stdout)
    check(r["inputs"][0]["dtype"] == "int64" and r["mode"] == "forward", "inputs %s" % r["inputs"])
    check(sum(p["bytes"] for p in r["memory"]) == r["peak_bytes"], "forward: the parts do not add up")
    check(r["budget_auto"], "the default budget is not auto")
    events = r["unsplit_timeline"]["events"]
    check(all(e["phase"] == "forward" for e in events), "a forward plan has backward events")
    check(any(e["op"] == "aten::embedding" for e in events), "no aten::embedding in %s" % [e["op"] for e in events])


def case_errors(a):
    model = os.path.join(a.corpus, "vit_small.pt")
    not_a_model = os.path.join(a.work, "not_a_model.pt")
    with open(not_a_model, "w") as f:
        f.write("this is not a TorchScript archive\n")
    base = ["--input", "3x32x32", "--batch", "8"]
    cases = [
        (["plan", os.path.join(a.work, "missing.pt")] + base, "No such file"),
        (["plan", not_a_model] + base, "cannot load"),
        (["plan", a.work] + base, "directory"),
        (["plan", model, "--input", "3xfoo", "--batch", "8"], "'foo' is not a positive size"),
        (["plan", model, "--input", "3x32x32:complex", "--batch", "8"], "unknown dtype"),
        (["plan", model, "--input", "3x31x32", "--batch", "8"], "does not accept the inputs"),
        (["plan", model] + base + ["--device", "cuda:0"], "cuda:0"),
        (["plan", model] + base + ["--device", "tpu"], "unknown device"),
        (["plan", model] + base + ["--budget", "12XB"], "--budget '12XB'"),
        (["plan", model] + base + ["--budget", "-5GiB"], "--budget"),
        (["plan", model, "--input", "3x32x32", "--batch", "-4"], "--batch '-4'"),
        (["plan", model, "--input", "3x32x32", "--batch", "0"], "--batch '0'"),
        (["plan", model, "--input", "3x32x32"], "missing --batch"),
        (["plan", model] + base + ["--budget", "1KiB"], "not even a chunk of one sample fits"),
        (["plan", model] + base + ["--mode", "training"], "needs --loss"),
        (["plan", model] + base + ["--mode", "training", "--loss", "cross_entropy:7"], "not [batch, 7"),
        (["fit", model] + base + ["--svg", "x.svg"], "--svg applies to koila plan"),
        (["plan", model] + base + ["--recompute", "sometimes"], "--recompute 'sometimes': expected off or as-needed"),
        (["plan", model] + base + ["--svg", os.path.join(a.work, "no", "such", "dir", "x.svg")], "cannot write"),
        (["frobnicate", model], "unknown command"),
        ([], "missing command"),
    ]
    for args, needle in cases:
        proc = run(args, a.koila, expect_rc=None)
        label = "koila " + " ".join(args)
        lines = proc.stderr.splitlines()
        check(proc.returncode in (1, 2), "%s: exit status %d" % (label, proc.returncode))
        check(len(lines) == 1 and lines[0].startswith("koila: error: "), "%s: stderr %r" % (label, proc.stderr))
        check(needle.lower() in proc.stderr.lower(), "%s: %r not in %r" % (label, needle, proc.stderr))
        check(proc.stdout == "", "%s: stdout %r" % (label, proc.stdout))
        for trace in ("terminate called", "Traceback", "Exception raised from", "what():", "frame #"):
            check(trace not in proc.stderr, "%s: %r in stderr" % (label, trace))


def case_exported(a):
    """A torch.export program (the corpus's 2.x configuration) plans and fits as its
    TorchScript twin does, in the mode it was exported in whatever --mode says."""
    program = os.path.join(a.corpus, "vit_small.train.pt2")
    if not os.path.exists(program):
        print("no exported programs in this corpus (a PyTorch without torch.export made it): nothing to check")
        return
    twin = plan_json(a, ["--batch", "256", "--budget", "24MiB"])
    proc = run(["plan", program] + VIT + ["--batch", "256", "--budget", "24MiB", "--json"], a.koila)
    r = json.loads(proc.stdout)
    check(r["module_kind"] == "exported" and r["module_mode"] == "training", "kind and mode: %s %s" % (r["module_kind"], r["module_mode"]))
    check(twin["module_kind"] == "torchscript", "the twin's kind: %s" % twin["module_kind"])
    check(r["chunks"] >= 2 and r["chunk"] == twin["chunk"], "plan: %s, the twin's: %s" % (r["description"], twin["description"]))
    check_parts(r, "exported plan")
    text = run(["plan", program] + VIT[:2] + ["--batch", "64"], a.koila).stdout
    check("in the training mode it was exported in" in text, "forward of a training program: %r" % text[:400])
    proc = run(["fit", program] + VIT + ["--batch", "1024", "--budget", "48MiB", "--verify", "--json"], a.koila)
    fit = json.loads(proc.stdout)
    n = fit["largest_unsplit_batch"]
    check(n > 0 and fit["largest_unsplit_peak_bytes"] <= fit["budget_bytes"], "fit: %d" % n)
    check(fit["verify"]["batch"] == n and fit["verify"]["measured_peak_bytes"] <= fit["budget_bytes"],
          "fit --verify: %s" % fit["verify"])


def case_help(a):
    proc = run(["--help"], a.koila)
    check(proc.stdout.startswith("usage: koila plan") and "--svg FILE" in proc.stdout, "--help: %r" % proc.stdout[:80])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--koila", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("case")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    globals()["case_" + a.case](a)
    if FAILURES:
        sys.exit("%d checks failed" % len(FAILURES))
    print("ok")


if __name__ == "__main__":
    main()
