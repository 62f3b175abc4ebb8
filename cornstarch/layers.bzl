"""The layer order of cornstarch/: a library may depend only on the layers below it.

Each folder under cornstarch/ is one Bazel package holding one library named after the folder, declared with
`cornstarch_layer`. Its visibility is the layers above it and the packages outside the library (tools, benchmarks,
fuzzing, tests): Bazel then refuses an upward dependency ("target ... is not visible"), and its check of each compile's
included headers refuses an include of a header outside the declared dependencies. tools/check_layers.sh proves
both.
"""

LAYERS = [
    "base",  # errors, logging, seeds, version: no tensors, no network
    "plan",  # config, encoder kinds, model spec, mask words and tiles, rank mesh, costs, partitioner, planner,
    # schedules, CP balancer, packing plan, LR schedule: pure planning, no tensors, no network
    "device",  # the LibTorch runtime and CUDA device queries
    "dist",  # communicators (single-process, MPI, NCCL) and the rank mesh's groups
    "data",  # batches, datasets, tokenizer, media decoding, loader
    "model",  # layers, attention (context-parallel included), the multimodal model
    "io",  # safetensors and Hugging Face weights
    "train",  # pipeline executor, profiler, optimizer, checkpoints, metrics, the trainer's parts, the trainer
]

OUTSIDE = [
    "//bench:__pkg__",
    "//fuzz:__pkg__",
    "//tests:__subpackages__",
    "//tools:__pkg__",
]

def cornstarch_layer(deps, exclude = [], extra_visibility = []):
    """The library of this folder: every header and source in it (but `exclude`), visible to the layers above."""
    layer = native.package_name().split("/")[-1]
    above = LAYERS[LAYERS.index(layer) + 1:]
    native.cc_library(
        name = layer,
        srcs = native.glob(["*.cc"], exclude = exclude),
        hdrs = native.glob(["*.h"]),
        visibility = ["//cornstarch/%s:__pkg__" % l for l in above] + extra_visibility + OUTSIDE,
        deps = deps,
    )
