#!/usr/bin/env bash
# Collects here (Debian 12) what a CMake build of the cornstarch tools needs besides LibTorch, CUDA and the C/C++
# runtime, into one folder under 48 MiB to copy to a GPU machine that has nvcc, CMake and a pip-installed PyTorch but
# none of Debian's -dev packages:
#
#   tools/gpu_bundle.sh build/gpu-bundle
#   (there) tools/cmake_build.sh -DCORNSTARCH_BUNDLE=$PWD/build/gpu-bundle -DCORNSTARCH_LIBTORCH=<torch folder>
#
# include/: exactly the headers of yaml-cpp, spdlog/fmt, nlohmann-json, OpenMPI, libpng, libjpeg, libsndfile, PCRE2
# and ICU that the compiler read in this machine's CMake build (its dependency lists), so nothing unused is carried.
# Any other header of that build must come from the C/C++ runtime, LibTorch or CUDA, which the GPU machine has; one
# from anywhere else stops the script with its name and package. lib/: those nine libraries and every library they
# load, less the C runtime (glibc, libstdc++, libgcc_s: the GPU machine's own, newer, are compatible); each under its
# soname, plus a one-line linker script under the name `-l` looks for (no symlinks, which copies may not keep).
# MPI is there so the binary loads: a single process never starts MPI (dist/runtime.cc); a multi-rank job on that
# machine needs an MPI installation of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/gpu_bundle.sh OUT_DIR}
limit_mib=48

DEV_PACKAGES=(libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libopenmpi-dev libpng-dev
              libjpeg62-turbo-dev libsndfile1-dev libpcre2-dev libicu-dev)
LIBS=(yaml-cpp spdlog fmt png16 jpeg sndfile pcre2-8 icuuc mpi)  # CMakeLists.txt's system_libs
LIB=/usr/lib/x86_64-linux-gnu
C_RUNTIME='^(libc|libm|libdl|librt|libpthread|libresolv|libstdc\+\+|libgcc_s)\.so|^ld-linux'

build=build/cmake
[[ -f $build/build.ninja ]] || bash tools/cmake_build.sh
ninja -C "$build" -t deps | awk '/^    \//{print $1}' | xargs realpath -s | sort -u > "$build/headers.txt"

rm -rf "$out"
mkdir -p "$out/include" "$out/lib"

# The -dev packages' files; a header read from them goes to include/ under its path below its include root.
dpkg -L "${DEV_PACKAGES[@]}" | sort -u > "$build/dev_files.txt"
mapfile -t ours < <(comm -12 "$build/headers.txt" "$build/dev_files.txt")
for header in "${ours[@]}"; do
  rel=$header
  for root in "$LIB/openmpi/include/" /usr/include/x86_64-linux-gnu/ /usr/include/; do
    if [[ $header == "$root"* ]]; then rel=${header#"$root"}; break; fi
  done
  mkdir -p "$out/include/$(dirname "$rel")"
  cp -L "$header" "$out/include/$rel"
done

# Every other header must be the C/C++ runtime's, LibTorch's or CUDA's. Debian's LibTorch also includes glog and
# gflags headers (its c10 logging), which a pip PyTorch does not.
DEBIAN_TORCH='libtorch-dev|libgoogle-glog-dev|libgflags-dev'
others=$(comm -23 "$build/headers.txt" "$build/dev_files.txt" |
         grep -vE '^/usr/local/cuda|/torch/|^/usr/include/(c10|ATen|caffe2)/' || true)
if [[ -n $others ]]; then
  unexpected=$(dpkg -S $others 2>/dev/null | cut -d: -f1 | tr ',' '\n' | sed 's/ //g' | sort -u |
               grep -vE "^(libc6-dev|linux-libc-dev|libstdc\+\+-[0-9]+-dev|libgcc-[0-9]+-dev|$DEBIAN_TORCH)$" || true)
  if [[ -n $unexpected ]]; then
    echo "gpu_bundle: the build reads headers of packages this bundle does not carry: $unexpected" >&2
    exit 1
  fi
fi

# The libraries and their closure, less the C runtime.
declare -A copied=()
for name in "${LIBS[@]}"; do
  real=$(readlink -f "$LIB/lib$name.so")
  soname=$(objdump -p "$real" | awk '/SONAME/{print $2}')
  printf 'INPUT(%s)\n' "$soname" > "$out/lib/lib$name.so"
  for dep in "$real" $(ldd "$real" | awk '/=> \//{print $3}'); do
    base=$(basename "$dep")
    [[ $dep == "$real" ]] && base=$soname
    [[ $base =~ $C_RUNTIME || -n ${copied[$base]:-} ]] && continue
    cp -L "$dep" "$out/lib/$base"
    copied[$base]=1
  done
done

size_kib=$(du -sk "$out" | cut -f1)
echo "gpu_bundle: $out: ${#ours[@]} headers, ${#copied[@]} libraries, $((size_kib / 1024)) MiB"
if ((size_kib > limit_mib * 1024)); then
  echo "gpu_bundle: $out is over the limit of $limit_mib MiB" >&2
  exit 1
fi
