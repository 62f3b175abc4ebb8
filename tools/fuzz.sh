#!/usr/bin/env bash
# Builds and runs libFuzzer targets under AddressSanitizer + UBSan:  tools/fuzz.sh TARGET|all SECONDS
#
# TARGET is a fuzz/<TARGET>_fuzz.cc. Each target is compiled with clang (-fsanitize=fuzzer,address,undefined)
# from the reader's own sources, which need no LibTorch. Its kept regression inputs (fuzz/regressions/TARGET/) and
# its seed corpus (valid files written by the project: bazel-bin/fuzz/make_corpus) are replayed first, then it
# fuzzes for SECONDS. A crash, sanitizer report, leak, timeout or an exception other than cornstarch::Error fails
# the target; the input is minimised into fuzz/regressions/TARGET/ to be kept. Prints per target executions,
# executions per second and coverage (edges), and ends with "N passed, M failed". Sources are compiled once each and
# the targets run side by side, as many at a time as there are cores.
set -uo pipefail
cd "$(dirname "$0")/.."

targets=(safetensors_header hf_index sentencepiece hf_tokenizer conversations config image audio checkpoint_manifest
  webdataset schedule)
# The sources each target links: the reader and what it uses, nothing that needs LibTorch.
tokenizers="cornstarch/data/tokenizer.cc cornstarch/data/sentencepiece_tokenizer.cc cornstarch/data/hf_tokenizer.cc"
declare -A sources=(
  [safetensors_header]="cornstarch/io/safetensors_header.cc"
  [hf_index]="cornstarch/io/hf_index.cc"
  [sentencepiece]="$tokenizers"
  [hf_tokenizer]="$tokenizers"
  [conversations]="cornstarch/data/conversation.cc cornstarch/data/chat_template.cc $tokenizers"
  [config]="$(ls cornstarch/plan/*.cc | grep -v layering_probe | tr '\n' ' ')"
  [image]="cornstarch/data/image.cc $(ls cornstarch/plan/*.cc | grep -v layering_probe | tr '\n' ' ')"
  [audio]="cornstarch/data/audio_file.cc"
  [checkpoint_manifest]="cornstarch/train/checkpoint_manifest.cc"
  [webdataset]="cornstarch/data/webdataset.cc"
  [schedule]="cornstarch/plan/schedule.cc"
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
# tokenizer.json seeds: the tokenizer test's files (hand-made ones and the trained layouts in their folders).
mkdir -p "$work/seeds/hf_tokenizer"
for f in tests/data/testdata/tokenizers/*.json tests/data/testdata/tokenizers/*/tokenizer.json; do
  [[ -f $f && $f != */cases.json ]] && cp "$f" "$work/seeds/hf_tokenizer/$(basename "$(dirname "$f")")-$(basename "$f")"
done

# Every source is compiled once (shared by the targets that link it), as many at a time as there are cores.
cores=$(nproc)
objs="$work/obj"
mkdir -p "$objs"
obj_of() { echo "$objs/$(echo "$1" | tr '/' '_').o"; }
flags=(-std=c++17 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -I.
  -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL)
all_sources=$(for t in "${selected[@]}"; do echo "fuzz/${t}_fuzz.cc" cornstarch/base/check.cc cornstarch/base/json.cc \
  ${sources[$t]}; done | tr ' ' '\n' | sort -u)
export -f obj_of
export objs
# shellcheck disable=SC2016
echo "$all_sources" | xargs -P "$cores" -I{} bash -c 'clang++ "$@" -c {} -o "$(obj_of {})" 2>"$(obj_of {}).log" || \
  { cat "$(obj_of {}).log"; rm -f "$(obj_of {})"; }' _ "${flags[@]}"

# One target: link, replay its regressions and seeds, fuzz; its result line goes to $work/$t.result.
run_target() {
  local t=$1 bin="$work/$1" objects=()
  for f in "fuzz/${t}_fuzz.cc" cornstarch/base/check.cc cornstarch/base/json.cc ${sources[$t]}; do
    objects+=("$(obj_of "$f")")
  done
  if ! clang++ -fsanitize=fuzzer,address,undefined "${objects[@]}" -lyaml-cpp -lspdlog -lfmt -lpng -ljpeg -lsndfile \
      -lpcre2-8 -licuuc -o "$bin" 2>"$work/$t.build.log"; then
    { cat "$work/$t.build.log"; echo "$t: FAILED to build"; } >"$work/$t.result"
    return
  fi
  local regressions="fuzz/regressions/$t" corpus="$work/corpus/$t"
  mkdir -p "$regressions" "$corpus" "$work/crashes/$t"
  rm -f "$work/crashes/$t"/*
  # Replay, then fuzz; new interesting inputs go to the scratch corpus, the seeds and regressions stay as they are.
  "$bin" -runs=0 "$regressions" "$work/seeds/$t" >"$work/$t.replay.log" 2>&1
  local rc=$?
  if [[ $rc -eq 0 ]]; then
    local dict=()
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
  fi
  local execs rate cov
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t.log" | grep -o '[0-9]*$')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$work/$t.log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$work/$t.log" | tail -1 | grep -o '[0-9]*$')
  if [[ $rc -eq 0 ]]; then
    echo "$t: PASSED  ${execs:-0} executions, ${rate:-0}/s, ${cov:-0} edges" >"$work/$t.result"
    return
  fi
  {
    grep -E 'ERROR|SUMMARY|terminate|what\(\)' "$work/$t.log" | head -5
    for crash in "$work/crashes/$t"/*; do
      [[ -f $crash ]] || continue
      local kept="$regressions/$(basename "$crash")"
      "$bin" -minimize_crash=1 -runs=20000 -exact_artifact_path="$kept" "$crash" >/dev/null 2>&1 || cp "$crash" "$kept"
      echo "$t: kept the input as $kept"
    done
    echo "$t: FAILED (log: $work/$t.log)"
  } >"$work/$t.result"
}

# The targets run side by side, one per core (a fuzzer is single-threaded); results print in target order.
for t in "${selected[@]}"; do
  rm -f "$work/$t.result"
  while (($(jobs -rp | wc -l) >= cores)); do wait -n; done
  run_target "$t" &
done
wait
passed=0
failed=0
for t in "${selected[@]}"; do
  cat "$work/$t.result" 2>/dev/null || echo "$t: FAILED (no result)"
  if grep -q "^$t: PASSED" "$work/$t.result" 2>/dev/null; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
