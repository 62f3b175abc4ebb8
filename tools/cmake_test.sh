#!/usr/bin/env bash
# The CMake build against Debian's LibTorch (tools/test.sh runs this after `bazel test //...`):
#   1. tools/cmake_build.sh compiles cornstarch-train from the Bazel source lists;
#   2. it trains the embedded tiny config for 30 steps to the loss curve of the Bazel build's binary: the same
#      sources, flags and LibTorch, so every step's loss must agree within 1e-6 relative (a difference means the
#      two builds differ), and the loss must fall (it trains);
#   3. tools/gpu_bundle.sh collects the GPU machine's bundle from this build, under its size limit, and the binary
#      loads the nine bundled libraries from it (LD_LIBRARY_PATH, checked with ldd) and trains to the same curve.
# Prints `cmake_build: PASSED` or `cmake_build: FAILED` (counted by tools/test.sh) and exits non-zero on failure.
set -uo pipefail
cd "$(dirname "$0")/.."

fail() { echo "cmake_build: $*" >&2; echo "cmake_build: FAILED"; exit 1; }

bazel_bin=bazel-bin/tools/cornstarch-train
[[ -x $bazel_bin ]] || fail "$bazel_bin is missing: run bazel build //tools:cornstarch-train first"
JOBS=${JOBS:-2} bash tools/cmake_build.sh || fail "the CMake build failed"
cmake_bin=build/cmake/cornstarch-train

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
train() {  # binary, metrics file, extra environment
  env "${@:3}" "$1" --set train.steps=30 --set logging.interval=10 --set logging.metrics_path="$2" \
    > "$2.log" 2>&1 || { cat "$2.log" >&2; return 1; }
}
losses() { sed -E 's/.*"loss":([^,}]+).*/\1/' "$1"; }
compare() {  # reference metrics, candidate metrics, what
  paste <(losses "$1") <(losses "$2") | awk -v what="$3" '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r
      if (n == 1) first = $2; last = $2 }
    END { printf "cmake_build: %s: %d steps, largest relative loss difference %.3g, loss %.4f -> %.4f\n",
                 what, n, worst, first, last
          exit !(n == 30 && worst <= 1e-6 && last < first) }'
}

train "$bazel_bin" "$tmp/bazel.jsonl" || fail "the Bazel binary did not train"
train "$cmake_bin" "$tmp/cmake.jsonl" || fail "the CMake binary did not train"
compare "$tmp/bazel.jsonl" "$tmp/cmake.jsonl" "CMake build vs Bazel build" || fail "the loss curves differ"

bash tools/gpu_bundle.sh "$tmp/bundle" || fail "tools/gpu_bundle.sh failed"
resolved=$(LD_LIBRARY_PATH="$tmp/bundle/lib" ldd "$cmake_bin")
for lib in libyaml-cpp libspdlog libfmt libpng16 libjpeg libsndfile libpcre2-8 libicuuc libmpi; do
  grep -qE "^\s*$lib\.so\.[0-9.]+ => $tmp/bundle/lib/" <<< "$resolved" || fail "$lib is not loaded from the bundle"
done
train "$cmake_bin" "$tmp/bundled.jsonl" LD_LIBRARY_PATH="$tmp/bundle/lib" || fail "the bundled run did not train"
compare "$tmp/bazel.jsonl" "$tmp/bundled.jsonl" "with the bundle's libraries" || fail "the bundled run differs"
echo "cmake_build: PASSED"
