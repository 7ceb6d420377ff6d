#!/bin/bash
# The GPU check: builds koila against the machine's PyTorch (a CUDA build), then on cuda:0
#   1. the CUDA tests (Cuda.*, CudaChunked.*, the NCCL group of one) and the allocator model's;
#   2. the real-model corpus (tests/corpus), each model unsplit with room, forced into at least
#      4 chunks, and in chunks of 4, 2 and 1 at the tightest budget that plans them: koila's
#      estimate against the measured peak, and the gradients against PyTorch's own on the same
#      GPU (tests/corpus/gpu_references.py; TF32 off in both);
#   3. the same forced splits with the caching allocator's expandable segments;
#   4. `koila fit --verify` at 1 GiB and 2 GiB for every corpus model (training);
#   5. bench_module_steps on cuda;
#   6. examples/train_ddp.c under torchrun with NCCL, one worker on cuda:0, against the same
#      run with Gloo on the CPU (the final parameters, within the GPU's arithmetic);
# and prints one table. For a machine with PyTorch and nothing else (no registry): carry
# GoogleTest's sources, Debian's gloo headers (process groups: the wheel ships none) and
# zlib's two headers in .gpu/, ignored by git:
#   mkdir -p .gpu && cp -r /usr/src/googletest .gpu/googletest && cp -r /usr/include/gloo .gpu/gloo-include/
#   mkdir -p .gpu/zlib && cp /usr/include/zlib.h /usr/include/zconf.h .gpu/zlib/
#   echo /.gpu/ >> .git/info/exclude
# then run `bash scripts/gpu_check.sh` on the GPU machine with .gpu carried. Logs and the table
# go to $OUT (or .gpu/out). Settings: STEPS (default "tests corpus expandable fit bench ddp"),
# TARGETS (what to build, default all), LIMIT (seconds for the whole check, default 540).
set -u
root=$(pwd)
out=${OUT:-$root/.gpu/out}; mkdir -p "$out"
logs=$root/.gpu/logs; mkdir -p "$logs"  # the build's logs (what comes back from a device is limited)
steps=" ${STEPS:-tests corpus expandable fit bench ddp} "
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$out/steps.txt"; }
# Seconds a step may take: at most $1, and never past ${LIMIT:-540} s from the start (a device
# call's limit is 600 s); 1 when no time is left (timeout 0 would be none).
within() { local left=$(( ${LIMIT:-540} - ($(date +%s) - t0) )); (( left < 1 )) && left=1; echo $(( left < $1 ? left : $1 )); }
nvidia-smi -L | tee -a "$out/steps.txt"
python3 -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' | tee -a "$out/steps.txt"
tp=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
py=$(command -v python3)
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
jobs=$(nproc)
build=.gpu/build

stamp "googletest"
if [[ ! -f .gpu/gt/ok ]]; then
  cmake -S .gpu/googletest -B .gpu/gt-build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$root/.gpu/gt" >/dev/null &&
    cmake --build .gpu/gt-build -j"$jobs" >/dev/null && cmake --install .gpu/gt-build >/dev/null && touch .gpu/gt/ok
fi
extra=()
if [[ ! -f /usr/include/zlib.h && -f .gpu/zlib/zlib.h ]]; then
  lib=$(ldconfig -p | awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')
  extra+=(-DZLIB_INCLUDE_DIR="$root/.gpu/zlib" -DZLIB_LIBRARY="$lib")
fi
[[ -f .gpu/gloo-include/gloo/config.h ]] && extra+=(-DKOILA_GLOO_INCLUDE_DIR="$root/.gpu/gloo-include")
stamp "configure"
cmake -S . -B $build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DKOILA_BUILD_BINDINGS=OFF -DKOILA_UNITY_BUILD=ON \
      -DKOILA_CORPUS_PYTHON="$py" "${extra[@]}" -DCMAKE_PREFIX_PATH="$tp;$root/.gpu/gt" > "$logs/configure.txt" 2>&1
grep -iE "^-- koila" "$logs/configure.txt" | tee -a "$out/steps.txt"
stamp "build"
targets=(); [[ -n ${TARGETS:-} ]] && targets=(--target $TARGETS)  # default: all
cmake --build $build -j"$jobs" "${targets[@]}" > "$logs/build.txt" 2>&1
grep -E 'error' "$logs/build.txt" | head -20
[[ -f $build/libkoila.so ]] || { echo "build failed"; tail -30 "$logs/build.txt"; exit 1; }

if [[ $steps == *" tests "* ]]; then
  stamp "CUDA tests"
  timeout $(within 150) $build/tests/koila_tests --gtest_filter='Cuda*:AllocatorModel*:Seeded.OnCuda*' > "$out/tests.txt" 2>&1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|^\[  FAILED|Failure" "$out/tests.txt" | head -30
fi

corpus=$build/tests/corpus/koila_corpus_tests
gpu_corpus=.gpu/corpus-cuda
if [[ $steps == *" corpus "* || $steps == *" expandable "* ]]; then
  stamp "PyTorch's references on the GPU"
  python3 tests/corpus/gpu_references.py $build/tests/corpus/models $gpu_corpus > "$logs/references.txt" 2>&1 ||
    tail -5 "$logs/references.txt"
fi
CORPUS_SECONDS=${CORPUS_SECONDS:-150}
run_corpus() {  # log, gtest filter, environment...
  local log=$1 filter=$2; shift 2
  env KOILA_CORPUS_DIR=$gpu_corpus KOILA_CORPUS_DEVICE=cuda:0 KOILA_CORPUS_MIN_CHUNKS=4 "$@" \
    timeout $(within $CORPUS_SECONDS) $corpus --gtest_filter="$filter" > "$out/$log" 2>&1
  grep -E "^\[  (PASSED|FAILED) |tests? ran" "$out/$log" | head -4
}
[[ $steps == *" corpus "* ]] && { stamp "corpus on cuda:0"; run_corpus corpus.txt 'Models/Corpus.*'; }
[[ $steps == *" expandable "* ]] && { stamp "corpus on cuda:0, expandable segments";
  run_corpus expandable.txt 'Models/Corpus.ForcedSplit*:Models/Corpus.Chunks*' PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; }

if [[ $steps == *" fit "* ]]; then
  stamp "koila fit --verify"
  : > "$out/fit.txt"
  while read -r name rest; do
    [[ $name == \#* || -z $name ]] && continue
    input=$(sed -E 's/.*input=([0-9x]+).*/\1/' <<< "$rest"); batch=${input%%x*}; sample=${input#*x}
    dtype=$(sed -E 's/.*dtype=([a-z0-9]+).*/\1/' <<< "$rest")
    [[ $rest == *results=* || $rest == *loss=squares_mean* ]] && continue  # one result, cross entropy
    for budget in 1GiB 2GiB; do
      echo "== $name $budget" >> "$out/fit.txt"
      start=$(date +%s)
      timeout $(within 20) $build/tools/koila/koila fit $gpu_corpus/$name.pt --input "$sample:$dtype" --batch "$batch" \
        --device cuda:0 --mode training --loss cross_entropy:10 --optimizer sgd --budget $budget \
        --per-chunk-stats --verify >> "$out/fit.txt" 2>&1 || echo "exit $?" >> "$out/fit.txt"
      echo "  took $(( $(date +%s) - start )) s" >> "$out/fit.txt"
    done
  done < $gpu_corpus/manifest.txt
fi
if [[ $steps == *" bench "* ]]; then
  stamp "bench_module_steps cuda"
  timeout $(within 60) $build/bench/bench_module_steps cuda 7 > "$out/module_steps.txt" 2>&1
fi
if [[ $steps == *" ddp "* ]]; then
  stamp "train_ddp: NCCL on cuda:0 against Gloo on the CPU, one worker each"
  rm -rf .gpu/ddp && mkdir -p .gpu/ddp/nccl .gpu/ddp/gloo
  for backend in nccl gloo; do
    KOILA_EXAMPLE_BACKEND=$backend KOILA_EXAMPLE_TIMEOUT_MS=20000 timeout $(within 60) \
      python3 -m torch.distributed.run --nproc-per-node 1 --master-port $((29400 + RANDOM % 500)) --no-python \
      $build/examples/koila_example_train_ddp $build/examples/cnn.pt .gpu/ddp/$backend 6 3 31 \
      > "$out/ddp_$backend.txt" 2>&1 || echo "exit $?" >> "$out/ddp_$backend.txt"
    grep -E '^rank|exit ' "$out/ddp_$backend.txt" | head -3
  done
  if python3 tests/launcher/compare_final.py .gpu/ddp/nccl/final.pt .gpu/ddp/gloo/final.pt 1e-3 > "$out/ddp.txt" 2>&1
  then verdict="within 1e-3"; else verdict="NOT within 1e-3, or a run did not finish"; fi
  echo "train_ddp with NCCL on cuda:0 against Gloo on the CPU ($verdict): $(tail -1 "$out/ddp.txt")" > "$out/ddp.txt"
  cat "$out/ddp.txt"
fi
stamp "table"
python3 - "$out" > "$out/table.txt" <<'PY'
import os, re, sys
out = sys.argv[1]
def rows(log):
    path = os.path.join(out, log)
    if not os.path.exists(path):
        return []
    text = open(path).read()
    found = []
    for m in re.finditer(r"\[corpus\] (\S+) \((\w+) mode, (\w+)\) ([^:]+): estimate ([\d.]+) MiB, measured ([\d.]+) MiB, "
                         r"error ([-+\d.]+)%, (\d+) chunk\(s\) of (\d+)(?: \(ran out of memory under it: ran in "
                         r"(\d+) after (\d+) retries\))?, budget (\S+)", text):
        found.append(m.groups())
    failed = re.findall(r"\[  FAILED  \] (\S+)", text)
    ooms = len(re.findall(r"OUT_OF_MEMORY|CUDA out of memory", text))
    return found, failed, ooms
for log, title in (("corpus.txt", "corpus on cuda:0"), ("expandable.txt", "expandable segments")):
    got = rows(log)
    if not got:
        continue
    found, failed, ooms = got
    retried = [f for f in found if f[9]]
    print(f"\n{title}: {len(found)} runs, {len(retried)} retried (out of memory under their plan), "
          f"{len(set(failed))} failed tests, {ooms} out-of-memory errors")
    print(f"{'model':22} {'mode':13} {'run':16} {'estimate':>9} {'measured':>9} {'error':>7} {'chunks':>9} retried")
    worst = 0.0
    for name, mm, km, what, est, meas, err, n, c, ran, retries, budget in found:
        if not retries:  # (a retried run's figures are its last attempt's, not the plan's)
            worst = max(worst, abs(float(err)))
        again = f"{retries}x, ran in {ran}" if retries else ""
        print(f"{name:22} {mm + '/' + km:13} {what:16} {est:>9} {meas:>9} {err:>6}% {n + 'x' + c:>9} {again}")
    print(f"largest error of the runs as planned {worst:.1f}%")
    for f in sorted(set(failed)):
        print("FAILED", f)
fit = os.path.join(out, "fit.txt")
if os.path.exists(fit):
    print("\nkoila fit --verify (training, sgd)")
    name = None
    for line in open(fit):
        if line.startswith("== "):
            name = line[3:].strip()
        elif (line.startswith("verified") or line.startswith("largest batch that") or line.startswith("  the ")
              or line.startswith("  took") or "exit " in line or "error" in line.lower()):
            print(f"{name:28} {line.strip()}")
PY
[[ -f $out/ddp.txt ]] && cat "$out/ddp.txt" >> "$out/table.txt"
cat "$out/table.txt"
stamp "done"
