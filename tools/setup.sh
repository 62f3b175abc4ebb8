#!/usr/bin/env bash
# Installs every Debian package cornstarch needs to build, test and run. Idempotent: packages already present are
# skipped, so CI and new users can run it every time.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap        # Bazel 4.2.3, offline build
  bazel-rules-java       # local rules_java for Bazel's built-in tools
  g++
  libtorch-dev           # LibTorch 1.13.1 C++ frontend (CPU)
  libopenblas0-pthread   # fast BLAS for LibTorch (the reference BLAS is ~50x slower)
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev
  libspdlog-dev libfmt-dev
  nlohmann-json3-dev
  sentencepiece          # spm_train/spm_encode: tokenizers for generated datasets, reference for the tests
  libjpeg62-turbo-dev libpng-dev libsndfile1-dev  # image and audio decoding
  catch2
  clang                  # libFuzzer, AddressSanitizer and UBSan for tools/fuzz.sh
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
