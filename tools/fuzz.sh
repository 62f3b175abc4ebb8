#!/usr/bin/env bash
# Builds and runs libFuzzer targets under AddressSanitizer + UBSan:  tools/fuzz.sh TARGET|all SECONDS
#
# TARGET is a fuzz/<TARGET>_fuzz.cc. Each target is compiled with clang (-fsanitize=fuzzer,address,undefined)
# from the reader's own sources, which need no LibTorch. Its kept regression inputs (fuzz/regressions/TARGET/) and
# its seed corpus (valid files written by the project: bazel-bin/fuzz/make_corpus) are replayed first, then it
# fuzzes for SECONDS. A crash, sanitizer report, leak, timeout or an exception other than cornstarch::Error fails
# the target; the input is minimised into fuzz/regressions/TARGET/ to be kept. Prints per target executions,
# executions per second and coverage (edges), and ends with "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."

targets=(safetensors_header hf_index sentencepiece conversations config image audio checkpoint_manifest)
# The sources each target links: the reader and what it uses, nothing that needs LibTorch.
declare -A sources=(
  [safetensors_header]="cornstarch/io/safetensors_header.cc"
  [hf_index]="cornstarch/io/hf_index.cc"
  [sentencepiece]="cornstarch/data/tokenizer.cc"
  [conversations]="cornstarch/data/conversation.cc cornstarch/data/tokenizer.cc"
  [config]="$(ls cornstarch/plan/*.cc | grep -v layering_probe | tr '\n' ' ')"
  [image]="cornstarch/data/image.cc $(ls cornstarch/plan/*.cc | grep -v layering_probe | tr '\n' ' ')"
  [audio]="cornstarch/data/audio_file.cc"
  [checkpoint_manifest]="cornstarch/train/checkpoint_manifest.cc"
)

[[ $# -eq 2 ]] || { echo "usage: tools/fuzz.sh TARGET|all SECONDS (targets: ${targets[*]})"; exit 2; }
if [[ $1 == all ]]; then selected=("${targets[@]}"); else selected=("$1"); fi
seconds=$2
for t in "${selected[@]}"; do
  [[ -n ${sources[$t]+x} ]] || { echo "fuzz.sh: no target '$t' (targets: ${targets[*]})"; exit 2; }
done

work=${FUZZ_WORK:-/tmp/cornstarch-fuzz}
mkdir -p "$work"
bazel build //fuzz:make_corpus >"$work/bazel.log" 2>&1 || { cat "$work/bazel.log"; echo "0 passed, 1 failed"; exit 1; }
rm -rf "$work/seeds"
bazel-bin/fuzz/make_corpus "$work/seeds" configs/tiny.yaml configs/*.yaml || { echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
for t in "${selected[@]}"; do
  bin="$work/$t"
  # shellcheck disable=SC2086
  if ! clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I. \
      -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL "fuzz/${t}_fuzz.cc" cornstarch/base/check.cc cornstarch/base/json.cc ${sources[$t]} \
      -lyaml-cpp -lspdlog -lfmt -lpng -ljpeg -lsndfile -o "$bin" 2>"$work/$t.build.log"; then
    cat "$work/$t.build.log"
    echo "$t: FAILED to build"
    failed=$((failed + 1))
    continue
  fi
  regressions="fuzz/regressions/$t"
  corpus="$work/corpus/$t"
  mkdir -p "$regressions" "$corpus" "$work/crashes/$t"
  rm -f "$work/crashes/$t"/*
  # Replay, then fuzz; new interesting inputs go to the scratch corpus, the seeds and regressions stay as they are.
  "$bin" -runs=0 "$regressions" "$work/seeds/$t" >"$work/$t.replay.log" 2>&1
  replay=$?
  if [[ $replay -eq 0 ]]; then
    dict=()
    [[ -f fuzz/$t.dict ]] && dict=(-dict="fuzz/$t.dict")  # the format's keywords, where mutation alone is slow
    if [[ $t == config ]]; then
      # The config's keys and choices, from its generated reference (docs/configuration.md).
      grep -o '`[a-z0-9_.]*`' docs/configuration.md | tr -d '`' | tr '.' '\n' | sort -u | sed 's/.*/"&:"/' \
        >"$work/config.dict"
      dict=(-dict="$work/config.dict")
    fi
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
      "${dict[@]}" -artifact_prefix="$work/crashes/$t/" "$corpus" "$regressions" "$work/seeds/$t" >"$work/$t.log" 2>&1
    rc=$?
  else
    cp "$work/$t.replay.log" "$work/$t.log"
    rc=$replay
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t.log" | grep -o '[0-9]*$')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$work/$t.log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$work/$t.log" | tail -1 | grep -o '[0-9]*$')
  if [[ $rc -eq 0 ]]; then
    passed=$((passed + 1))
    echo "$t: PASSED  ${execs:-0} executions, ${rate:-0}/s, ${cov:-0} edges"
  else
    failed=$((failed + 1))
    grep -E 'ERROR|SUMMARY|terminate|what\(\)' "$work/$t.log" | head -5
    for crash in "$work/crashes/$t"/*; do
      [[ -f $crash ]] || continue
      kept="$regressions/$(basename "$crash")"
      "$bin" -minimize_crash=1 -runs=20000 -exact_artifact_path="$kept" "$crash" >/dev/null 2>&1 || cp "$crash" "$kept"
      echo "$t: kept the input as $kept"
    done
    echo "$t: FAILED (log: $work/$t.log)"
  fi
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
