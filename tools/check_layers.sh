#!/usr/bin/env bash
# Checks the layering of cornstarch/ (cornstarch/layers.bzl): one library per folder, named after it, and Bazel
# refusing both kinds of upward reference, proven by the probes in cornstarch/plan/BUILD.bazel, which must not
# build. Prints one "PASSED"/"FAILED" line per check (tools/test.sh counts them) and exits non-zero on a failure.
set -uo pipefail
cd "$(dirname "$0")/.."

failed=0
report() {  # report NAME OK
  if [[ $2 -eq 0 ]]; then echo "//tools:check_layers/$1 PASSED"; else echo "//tools:check_layers/$1 FAILED"; failed=1; fi
}

# One cc_library per folder of cornstarch/, named after the folder (the manual probes aside).
libs=$(bazel query --noshow_progress 'kind(cc_library, //cornstarch/...) except attr(tags, manual, //cornstarch/...)' 2>/dev/null | sort)
expected=$(for d in cornstarch/*/; do d=${d%/}; echo "//${d}:${d#cornstarch/}"; done | sort)
if [[ "$libs" == "$expected" ]]; then ok=0; else ok=1; diff <(echo "$expected") <(echo "$libs"); fi
report one_library_per_folder $ok

# Each probe must fail for the stated reason, not for some other breakage.
probe() {  # probe TARGET EXPECTED_MESSAGE
  local out
  out=$(bazel build --noshow_progress "$1" 2>&1)
  if [[ $? -ne 0 ]] && grep -q "$2" <<<"$out"; then return 0; fi
  echo "$1: expected the build to fail with '$2'; got:"; echo "$out" | tail -5
  return 1
}
probe //cornstarch/plan:probe_upward_dep "is not visible from target '//cornstarch/plan:probe_upward_dep'"
report upward_dependency_refused $?
probe //cornstarch/plan:probe_upward_include "cornstarch/model/layer.h: No such file"
report upward_include_refused $?

exit $failed
