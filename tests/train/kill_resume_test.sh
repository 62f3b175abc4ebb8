#!/usr/bin/env bash
# Kill-and-resume with the real binary: a run killed with SIGKILL once its step-15 checkpoint exists, then
# restarted with --resume, must log exactly the losses of an uninterrupted run (every step, full precision).
#   kill_resume_test.sh CORNSTARCH_TRAIN CONFIG
set -euo pipefail
train=$1
config=$2
dir="${TEST_TMPDIR:-/tmp}/kill-resume"
rm -rf "$dir"
mkdir -p "$dir"
args() {  # args NAME [ARGS...]: the trainer's arguments for run NAME, in ARGS
  local name=$1
  shift
  ARGS=(--config "$config" --set train.steps=40 --set checkpoint.interval=5 --set train.num_threads=1
    --set logging.interval=1000 --set checkpoint.dir="$dir/$name" --set logging.metrics_path="$dir/$name.jsonl" "$@")
}

args full
"$train" "${ARGS[@]}" > "$dir/full.log" 2>&1

# Started directly (not through a function, which would run in a subshell) so that $! is the trainer itself and
# the kill leaves no orphan writing checkpoints next to the resumed run.
args killed
"$train" "${ARGS[@]}" > "$dir/killed.log" 2>&1 &
pid=$!
for _ in $(seq 1200); do
  [ -e "$dir/killed/step-00000015/manifest.json" ] && break
  sleep 0.05
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
[ -e "$dir/killed/step-00000015/manifest.json" ] || { echo "FAIL: no step-15 checkpoint"; cat "$dir/killed.log"; exit 1; }

args killed --resume
"$train" "${ARGS[@]}" > "$dir/resumed.log" 2>&1 || { echo "FAIL: resume failed"; cat "$dir/resumed.log"; exit 1; }
grep -q "resumed from" "$dir/resumed.log" || { echo "FAIL: did not resume"; cat "$dir/resumed.log"; exit 1; }
grep -h "resumed from" "$dir/resumed.log"

losses() { grep -o '"loss":[^,]*' "$1"; }
[ "$(losses "$dir/full.jsonl" | wc -l)" -eq 40 ] || { echo "FAIL: uninterrupted run logged $(losses "$dir/full.jsonl" | wc -l) steps"; exit 1; }
if ! diff <(losses "$dir/full.jsonl") <(losses "$dir/killed.jsonl"); then
  echo "FAIL: the resumed run's losses differ from the uninterrupted run's"
  exit 1
fi
echo "PASS: 40 losses identical after kill -9 and --resume"
