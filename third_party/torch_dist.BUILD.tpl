# An unpacked LibTorch distribution (CORNSTARCH_LIBTORCH): headers inside it, libraries found through an rpath.
# --no-as-needed keeps torch's static operator and backend registrations in the binary.
cc_library(
    name = "torch",
    hdrs = glob(["include/**"]),
    defines = [%{defines}],
    includes = [
        "include",
        "include/torch/csrc/api/include",
    ],
    linkopts = [
        "-L%{lib_dir}",
        "-Wl,-rpath,%{lib_dir}",
        "-Wl,--push-state,--no-as-needed",
        %{libs},
        "-Wl,--pop-state",
        "-lpthread",
    ],
    visibility = ["//visibility:public"],
)
