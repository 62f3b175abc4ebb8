"""Multi-rank tests: one sh_test per world size, running a test binary under mpirun inside `bazel test`."""

def mpirun_tests(name, binary, nps, data = [], size = "medium"):
    """<name>_np<N>_test for each N in `nps`: `mpirun -np N binary` (tests/dist/mpirun_test.sh)."""
    for np in nps:
        native.sh_test(
            name = "%s_np%d_test" % (name, np),
            size = size,
            srcs = ["dist/mpirun_test.sh"],
            args = [str(np), "$(rootpath %s)" % binary],
            data = [binary] + data,
            tags = ["exclusive"],  # mpirun jobs oversubscribe the cores: one at a time
        )
