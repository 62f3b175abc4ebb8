#!/usr/bin/env bash
# Runs a test binary under mpirun with N ranks: mpirun_test.sh N BINARY [ARGS...]
set -euo pipefail
np=$1
shift
# Keep OpenMPI's session directory inside this test's sandbox.
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
exec mpirun --oversubscribe -np "$np" "$@"
