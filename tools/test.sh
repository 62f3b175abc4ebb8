#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (tools/setup.sh) and runs the whole test suite with Bazel.
# Ends with one line "N passed, M failed" (test targets, the layering checks and the fuzz targets) and exits non-zero
# if anything failed or did not build.
set -uo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp)
bazel test //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
# The layering of cornstarch/ (upward references must not build): counted like the test targets.
bash tools/check_layers.sh 2>&1 | tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1

# The CMake build (CMakeLists.txt) against Debian's LibTorch trains to the Bazel binary's loss curve, also with the
# GPU machine's bundle of libraries (tools/cmake_test.sh; through ccache, a minute when warm).
bash tools/cmake_test.sh 2>&1 | tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1

# The pure layers' tests (no LibTorch) once more, under AddressSanitizer + UBSan.
bazel test --config=sanitize //tests:config_test //tests:partitioner_test //tests:planner_test //tests:schedule_test \
  //tests:cp_balancer_test 2>&1 | tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1

# Every untrusted-file reader fuzzed under AddressSanitizer + UBSan (tools/fuzz.sh): its regression inputs and
# seeds replayed, then FUZZ_SECONDS (60) of fuzzing; each target counts like a test. The whole step stays under 10
# minutes on 2 cores (10 targets, two at a time: about 7 minutes, 2 of them the builds and the seed corpus).
fuzz_start=$SECONDS
bash tools/fuzz.sh all "${FUZZ_SECONDS:-60}" 2>&1 | tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
echo "fuzzing took $((SECONDS - fuzz_start)) s"

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED|^[a-z_]+: PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)|^[a-z_]+: FAILED' "$log")
if [[ $rc -ne 0 && $failed -eq 0 ]]; then
  failed=1  # the build itself failed before any test ran
fi
rm -f "$log"
echo "$passed passed, $failed failed"
[[ $rc -eq 0 && $failed -eq 0 ]]
