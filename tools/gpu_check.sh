#!/usr/bin/env bash
# The one prepared GPU check, for one GPU and at most GPU_CHECK_SECONDS (480) including the build, on a machine with
# nvcc, CMake, ninja and a pip-installed PyTorch but no Bazel and none of Debian's -dev packages. Carry there the
# working tree and build/gpu-bundle (made here by `tools/gpu_bundle.sh build/gpu-bundle`). It
#   1. builds cornstarch-train and gpu_check_attention with CMake against that PyTorch's LibTorch (sm_90 only),
#   2. checks the CUDA bitfield attention against the CPU kernel and times both (gpu_check_attention),
#   3. trains configs/bench/gpu-1b.yaml (Llama-1B-shaped LLM, frozen SigLIP-400M-shaped tower, seq 4096) on cuda:
#      20 steps in bf16, then 10 in fp32 (TF32 matrix products),
#   4. writes OUT/gpu_check.md (one table, then the loss curves side by side) beside every log.
# Each stage gets what is left of the time; at the limit the running stage is stopped and the table says so.
# Usage: tools/gpu_check.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/gpu_check.sh OUT_DIR}
mkdir -p "$out"
deadline=$((SECONDS + ${GPU_CHECK_SECONDS:-480}))
reserve=15  # seconds kept for the table
left() { echo $((deadline - reserve - SECONDS)); }
declare -A status=()

# Runs "$@" with at most $1 seconds (clipped to what is left), its output in $out/$2.log; sets status[$2].
stage() {
  local seconds=$1 name=$2
  shift 2
  ((seconds > $(left))) && seconds=$(left)
  if ((seconds <= 0)); then status[$name]="not run (out of time)"; return 1; fi
  local start=$SECONDS
  timeout --kill-after=10 "$seconds" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  case $rc in
    0) status[$name]="ok, $((SECONDS - start)) s" ;;
    124 | 137) status[$name]="stopped at its time limit ($seconds s)" ;;
    *) status[$name]="FAILED (exit $rc, see $name.log)" ;;
  esac
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2> /dev/null
gpu=$(head -1 "$out/gpu.txt")

# LibTorch of the machine's PyTorch; the bundle's C++ libraries use the C++11 ABI, so PyTorch must too.
torch_dir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2> "$out/torch.log")
torch_info=$(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda,
      "cxx11abi", int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>> "$out/torch.log")
build_dir=build/gpu
if [[ -z $torch_dir ]]; then
  status[build]="FAILED (no PyTorch: see torch.log)"
elif [[ $torch_info != *"cxx11abi 1"* ]]; then
  status[build]="FAILED (PyTorch $torch_info: not the C++11 ABI of the bundle's libraries)"
elif [[ ! -f build/gpu-bundle/include/yaml-cpp/yaml.h ]]; then
  status[build]="FAILED (build/gpu-bundle missing: make it with tools/gpu_bundle.sh and carry it)"
else
  stage 360 build env BUILD_DIR=$build_dir JOBS="$(nproc)" TARGETS="cornstarch-train gpu_check_attention" \
    bash tools/cmake_build.sh -DCORNSTARCH_LIBTORCH="$torch_dir" -DCORNSTARCH_BUNDLE="$PWD/build/gpu-bundle" \
    -DCMAKE_CUDA_ARCHITECTURES=90
fi

if [[ ${status[build]} == ok* ]]; then
  stage 60 attention "$build_dir/gpu_check_attention"
  # Two thirds of what is left for bf16, the rest for fp32.
  train=("$build_dir/cornstarch-train" --config configs/bench/gpu-1b.yaml --set train.device=cuda)
  stage $(($(left) * 2 / 3)) bf16 "${train[@]}" --set train.precision=bf16 --set train.steps=20 \
    --set logging.metrics_path="$out/bf16.jsonl"
  stage "$(left)" fp32 "${train[@]}" --set train.precision=fp32 --set train.steps=10 \
    --set logging.metrics_path="$out/fp32.jsonl"
fi

# A number of the metrics file's JSON line by key, in awk.
GET='function get(k) { return match($0, "\"" k "\":[^,}]+") ? substr($0, RSTART + length(k) + 3) + 0 : "" }'

# One row per training run from its metrics file: steady-state figures are medians over the steps after the first
# two (warm-up: allocator growth, kernel selection), or over all steps when fewer ran.
summary() {
  local name=$1 file=$out/$1.jsonl
  [[ -s $file ]] || { echo "| $name | 0 | | | | | | ${status[$name]:-not run} |"; return; }
  awk -v name="$name" -v status="${status[$name]:-not run}" "$GET"'
      { n = get("step"); loss[n] = get("loss"); t[n] = get("step_seconds"); tps[n] = get("tokens_per_second")
        mfu[n] = get("mfu"); if (get("peak_memory_mib") > mem) mem = get("peak_memory_mib") }
      function median(a, from, to,   m, i, j, v, k) {
        m = 0; for (i = from; i <= to; i++) v[++m] = a[i]
        for (i = 2; i <= m; i++) { k = v[i]; for (j = i - 1; j >= 1 && v[j] > k; j--) v[j + 1] = v[j]; v[j + 1] = k }
        return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }
      END { from = n > 2 ? 3 : 1
            printf "| %s | %d | %.3f | %.0f | %.1f%% | %.0f | %.4f -> %.4f | %s |\n", name, n, median(t, from, n),
                   median(tps, from, n), 100 * median(mfu, from, n), mem, loss[1], loss[n], status }' "$file"
}
losses() { [[ -s $out/$1.jsonl ]] && awk "$GET"'{ print get("step"), get("loss") }' "$out/$1.jsonl"; }

{
  echo "# cornstarch GPU check"
  echo
  echo "GPU: ${gpu:-none found}; PyTorch ${torch_info:-not found}; $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "| stage | result |"
  echo "| --- | --- |"
  for s in build attention; do echo "| $s | ${status[$s]:-not run} |"; done
  if [[ -s $out/attention.log ]]; then
    echo
    echo '```'
    tail -n 20 "$out/attention.log"
    echo '```'
  fi
  echo
  echo "Training configs/bench/gpu-1b.yaml on one GPU (step time, tokens/s and MFU: medians of steps 3 on; MFU against"
  echo "the GPU's dense bf16 peak; memory: the most in use on the GPU after a step, LibTorch's cache included)."
  echo
  echo "| run | steps | step time (s) | tokens/s | MFU | GPU memory (MiB) | loss first -> last | status |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
  summary bf16
  summary fp32
  echo
  echo "| step | loss bf16 | loss fp32 |"
  echo "| --- | --- | --- |"
  join -a 1 -a 2 -e - -o 0,1.2,2.2 <(losses bf16 | sort -k1,1) <(losses fp32 | sort -k1,1) | sort -n |
    awk 'function f(x) { return x == "-" ? x : sprintf("%.4f", x) } { printf "| %s | %s | %s |\n", $1, f($2), f($3) }'
} > "$out/gpu_check.md"
cat "$out/gpu_check.md"
[[ ${status[build]:-} == ok* && ${status[attention]:-} == ok* && ${status[bf16]:-} == ok* &&
   ${status[fp32]:-} == ok* ]]
