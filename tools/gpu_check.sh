#!/usr/bin/env bash
# For a machine with an NVIDIA GPU (sm_80 or sm_90) and this project's packages: builds the CUDA bitfield attention
# and checks it against the CPU kernel on random inputs, then times both. Exit code 0 = match.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
bazel build -c opt //tools:gpu_check_attention
exec bazel-bin/tools/gpu_check_attention
