#!/usr/bin/env bash
# Configures and builds CMakeLists.txt (the tools without Bazel) in BUILD_DIR (build/cmake) with ninja, through ccache
# when it is installed (cache in ~/.cache/cornstarch-ccache, so a warm rebuild compiles nothing). Arguments go to
# cmake's configure step, e.g. -DCORNSTARCH_LIBTORCH=<LibTorch> -DCORNSTARCH_BUNDLE=<tools/gpu_bundle.sh's folder>.
# TARGETS (default cornstarch-train) and JOBS (default: all cores) select what and how wide.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build/cmake}
launcher=()
if command -v ccache > /dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/cornstarch-ccache}
  # Paths inside the checkout are hashed relative to it, so a fresh clone (CI's) hits an earlier clone's cache.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja "${launcher[@]}" "$@" > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
grep '^-- cornstarch:' "$build/configure.log" || true
# shellcheck disable=SC2086
ninja -C "$build" -j "${JOBS:-$(nproc)}" ${TARGETS:-cornstarch-train}
