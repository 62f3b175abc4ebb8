#!/usr/bin/env bash
# A failing rank ends the whole job quickly and non-zero, and says which rank and operation failed.
set -uo pipefail
probe=$1
train=$2
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"  # OpenMPI's session directory stays in the sandbox
fail() { echo "FAIL: $*"; echo "--- output ---"; echo "$out"; exit 1; }

run() {  # run [-np N] PROGRAM ARGS...
  local start=$SECONDS np=2
  if [[ $1 == -np ]]; then np=$2; shift 2; fi
  out=$(timeout 60 mpirun --oversubscribe -np "$np" "$@" 2>&1)
  rc=$?
  elapsed=$((SECONDS - start))
}

run "$probe" throw
[[ $rc -ne 0 ]] || fail "throw: exit code 0"
[[ $rc -ne 124 ]] || fail "throw: the job hung"
((elapsed < 20)) || fail "throw: took ${elapsed}s"
grep -q '\[r1\].*rank 1 failed on purpose' <<<"$out" || fail "throw: the failing rank's error is missing"

run -np 3 "$probe" timeout
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "timeout: exit code $rc"
((elapsed < 20)) || fail "timeout: took ${elapsed}s"
grep -Eq "rank [12]: barrier on communicator 'world' \(rank [12] of 3\) did not complete within 1 s; world rank 0 did not arrive" <<<"$out" ||
  fail "timeout: the stuck operation and the absent rank are not reported"
# The two live ranks answered each other's roll call: only world rank 0 is named.
! grep -Eq "world ranks [0-9, ]+ did not arrive|world rank [12] did not arrive" <<<"$out" ||
  fail "timeout: a live rank was reported absent"

run "$probe" p2p
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "p2p: exit code $rc"
grep -q "rank 1: recv from world rank 0 (rank 1 of 'reversed') (tag 5) on communicator 'reversed' (rank 0 of 2) did not complete within 1 s; world rank 0 is stuck or dead" <<<"$out" ||
  fail "p2p: the peer is not named by its world rank"

# A layout that does not match the job is an error on every rank, before MPI starts.
run "$train" --set logging.metrics_path=
[[ $rc -eq 1 ]] || fail "layout mismatch: exit code $rc, expected 1"
n=$(grep -c 'parallel: pp=1 x dp=1 x cp=1 x tp=1 needs 1 ranks, but the job has 2 (from OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE)' <<<"$out")
((n == 2)) || fail "layout mismatch: reported by $n ranks, expected 2"
echo "PASS"
