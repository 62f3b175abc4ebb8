#!/usr/bin/env bash
# Installs every Debian package cornstarch needs to build, test and run. Idempotent: packages already present are
# skipped, so CI and new users can run it every time.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap        # Bazel 4.2.3, offline build
  bazel-rules-java       # local rules_java for Bazel's built-in tools
  g++
  libtorch-dev           # LibTorch 1.13.1 C++ frontend (CPU)
  libopenblas0-openmp    # fast BLAS for LibTorch (the reference BLAS is ~50x slower), on LibTorch's OpenMP pool
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev
  libspdlog-dev libfmt-dev
  nlohmann-json3-dev
  sentencepiece          # spm_train/spm_encode: tokenizers for generated datasets, reference for the tests
  libjpeg62-turbo-dev libpng-dev libsndfile1-dev  # image and audio decoding
  libpcre2-dev libicu-dev  # tokenizer.json: pre-tokenizer regexes, Unicode normalisation
  catch2
  clang                  # libFuzzer, AddressSanitizer and UBSan for tools/fuzz.sh
  cmake ninja-build ccache  # the CMake build (tools/cmake_test.sh); ccache keeps CI's warm rebuilds short
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# LibTorch loads OpenBLAS through these links. The OpenMP build shares LibTorch's thread pool, so large GEMMs use
# every intra-op thread without oversubscribing the cores; the pthreads build (Debian's default when both are
# present) would spin its own threads beside that pool, and the trainer then pins it to one thread.
LIB=/usr/lib/x86_64-linux-gnu
for link in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
  target="$LIB/openblas-openmp/$link"
  if [[ "$(readlink -f "$LIB/$link")" != "$(readlink -f "$target")" ]]; then
    echo "setup: $link -> $target"
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO update-alternatives --quiet --set "$link-x86_64-linux-gnu" "$target"
  fi
done
