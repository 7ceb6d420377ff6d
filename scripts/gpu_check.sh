#!/bin/bash
# The GPU check of issue 26's session, adapted from ../shared/gpu/check.sh so that it fits
# one device call (at most 600 s) on the lent machine (H200, torch 2.11 in a venv, no
# registry): Ninja where present, the venv's python3 for the corpus (the system one has no
# torch), the corpus left out where torchvision is missing, ctest cut at CTEST_TIMEOUT
# (default 200 s), then bench_module_steps (cut at 150 s) and bench_step_time on cuda.
# About 480 s there. Carry it as check.sh says:
#   mkdir -p .gpu && cp -r ../shared/gpu/. .gpu/ && cp -r /usr/src/googletest .gpu/googletest
#   cp scripts/gpu_check.sh .gpu/ && echo /.gpu/ >> .git/info/exclude
# and zlib's two headers (optimizer state files end with its CRC-32), for a machine without
# them: mkdir -p .gpu/zlib && cp /usr/include/zlib.h /usr/include/zconf.h .gpu/zlib/
# Settings: CTEST_REGEX (the tests to run, default all), CORPUS=OFF (leave the corpus out),
# BENCHES ("name args;name args", default "module_steps cuda 11;step_time cuda 5"),
# BENCH_TIMEOUT (each, default 150 s).
# then the device tool with carry [".gpu"] and command `bash .gpu/gpu_check.sh`.
# Logs under $OUT (or .gpu/out).
set -u
root=$(pwd)
out=${OUT:-$root/.gpu/out}; mkdir -p "$out"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$out/steps.txt"; }
nvidia-smi -L | tee "$out/gpu.txt"
python3 -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' | tee -a "$out/gpu.txt"
tp=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
py=$(command -v python3)
corpus=${CORPUS:-ON}
python3 -c 'import torchvision' 2>/dev/null || corpus=OFF
echo "corpus $corpus (python $py)" | tee -a "$out/gpu.txt"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
jobs=$(nproc)
stamp "googletest"
if [[ ! -f .gpu/gt/ok ]]; then
  cmake -S .gpu/googletest -B .gpu/gt-build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$root/.gpu/gt" >/dev/null &&
    cmake --build .gpu/gt-build -j"$jobs" >/dev/null && cmake --install .gpu/gt-build >/dev/null && touch .gpu/gt/ok
fi
zlib=()
if [[ ! -f /usr/include/zlib.h && -f .gpu/zlib/zlib.h ]]; then
  lib=$(ldconfig -p | awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')
  zlib=(-DZLIB_INCLUDE_DIR="$root/.gpu/zlib" -DZLIB_LIBRARY="$lib")
  echo "zlib: the carried headers with $lib" | tee -a "$out/gpu.txt"
fi
stamp "configure"
cmake -S . -B .gpu/build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DKOILA_BUILD_BINDINGS=OFF \
      -DKOILA_BUILD_CORPUS=$corpus -DKOILA_CORPUS_PYTHON="$py" -DKOILA_UNITY_BUILD=ON "${zlib[@]}" \
      -DCMAKE_PREFIX_PATH="$tp;$root/.gpu/gt" > "$out/configure.txt" 2>&1
tail -5 "$out/configure.txt"; grep -i "koila:" "$out/configure.txt"
stamp "build"
cmake --build .gpu/build -j"$jobs" > "$out/build.txt" 2>&1
grep -E 'error|warning:' "$out/build.txt" | head -40
[[ -f .gpu/build/libkoila.so ]] || { echo "build failed"; tail -30 "$out/build.txt"; exit 1; }
stamp "ctest"
(cd .gpu/build && timeout ${CTEST_TIMEOUT:-200} ctest -j12 -R "${CTEST_REGEX:-.}" --output-on-failure > "$out/ctest.txt" 2>&1)
grep -E "tests passed|Failed|\*\*\*|Not Run" "$out/ctest.txt" | head -40
grep -E "^\s*[0-9]+/[0-9]+ Test.*(Cuda|cuda)" "$out/ctest.txt" | head -20
IFS=';' read -ra benches <<< "${BENCHES:-module_steps cuda 11;step_time cuda 5}"
for b in "${benches[@]}"; do
  read -ra words <<< "$b"
  stamp "bench_$b"
  [[ -x .gpu/build/bench/bench_${words[0]} ]] &&
    timeout ${BENCH_TIMEOUT:-150} .gpu/build/bench/bench_${words[0]} "${words[@]:1}" 2>&1 | tee "$out/${words[0]}.txt" | tail -40
done
stamp "done"
