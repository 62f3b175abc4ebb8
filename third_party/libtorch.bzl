"""LibTorch as a Bazel repository: Debian's libtorch-dev (CPU) by default, or the unpacked LibTorch distribution
that the environment variable CORNSTARCH_LIBTORCH names (CPU or CUDA, 2.x, cxx11 ABI), as on GPU clusters.

Bazel re-runs this rule when CORNSTARCH_LIBTORCH changes, so switching between the two is one variable.
"""

_DEBIAN = "/usr/lib/x86_64-linux-gnu"

def _require(rctx, paths, hint):
    for path in paths:
        if not rctx.path(path).exists:
            fail("\n\ncornstarch: LibTorch is missing: {} not found.\n{}\n".format(path, hint))

def _libtorch_impl(rctx):
    root = rctx.os.environ.get("CORNSTARCH_LIBTORCH", "")
    if not root:
        _require(rctx, [
            "/usr/include/torch/csrc/api/include/torch/torch.h",
            "/usr/include/ATen/ATen.h",
            _DEBIAN + "/libtorch.so",
            _DEBIAN + "/libtorch_cpu.so",
            _DEBIAN + "/libc10.so",
        ], "Install Debian's package with `sudo apt-get install libtorch-dev` or run `tools/setup.sh`, or set " +
           "CORNSTARCH_LIBTORCH to an unpacked LibTorch.")
        rctx.symlink("/usr/include/torch/csrc/api/include", "api_include")
        rctx.symlink(rctx.attr.debian_build_file, "BUILD.bazel")
    else:
        root = root.rstrip("/")
        _require(rctx, [root + "/" + p for p in [
            "include/torch/csrc/api/include/torch/torch.h",
            "include/ATen/ATen.h",
            "lib/libtorch.so",
            "lib/libtorch_cpu.so",
            "lib/libc10.so",
        ]], "CORNSTARCH_LIBTORCH={} must be an unpacked LibTorch (its include/ and lib/).".format(root))
        rctx.symlink(root + "/include", "include")

        # libtorch_cuda only registers the CUDA backend from static initialisers, so it is linked even though no
        # symbol of it is referenced.
        libs = ["torch", "torch_cpu", "c10"]
        defines = []
        if rctx.path(root + "/lib/libtorch_cuda.so").exists:
            libs += ["torch_cuda", "c10_cuda"]
            defines.append('"CORNSTARCH_TORCH_CUDA"')  # cornstarch/device/cuda_stream.cc
        rctx.template("BUILD.bazel", rctx.attr.dist_build_file, {
            "%{lib_dir}": root + "/lib",
            "%{libs}": ", ".join(['"-l{}"'.format(lib) for lib in libs]),
            "%{defines}": ", ".join(defines),
        })
    rctx.file("WORKSPACE", "workspace(name = \"{}\")\n".format(rctx.attr.name))

libtorch_library = repository_rule(
    implementation = _libtorch_impl,
    local = True,
    environ = ["CORNSTARCH_LIBTORCH"],
    attrs = {
        "debian_build_file": attr.label(mandatory = True, allow_single_file = True),
        "dist_build_file": attr.label(mandatory = True, allow_single_file = True),
    },
)
