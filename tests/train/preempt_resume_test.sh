#!/usr/bin/env bash
# Preemption with the real binary under mpirun (pp = 2): SIGUSR1 sent to mpirun mid-run (OpenMPI forwards it to
# every rank, as Slurm's --signal does) must end the job with exit 0 after a step every rank agrees on, with a
# checkpoint of that step and a log line naming the signal; --resume must then log exactly the losses of an
# uninterrupted run (every step, full precision).
#   preempt_resume_test.sh CORNSTARCH_TRAIN CONFIG
set -euo pipefail
train=$1
config=$2
dir="${TEST_TMPDIR:-/tmp}/preempt"
rm -rf "$dir"
mkdir -p "$dir"
export TMPDIR="$dir"  # OpenMPI's session directory
steps=40
args() {  # args NAME [ARGS...]: the trainer's arguments for run NAME, in ARGS
  local name=$1
  shift
  ARGS=(--config "$config" --set train.steps=$steps --set parallel.pp=2 --set parallel.pipeline_costs=flops
    --set train.num_threads=1 --set logging.interval=1000 --set checkpoint.dir="$dir/$name"
    --set logging.metrics_path="$dir/$name.jsonl" "$@")
}
run() { mpirun --oversubscribe -np 2 "$train" "$@"; }
wait_lines() {  # wait_lines FILE N: until FILE has N lines (at most a minute)
  for _ in $(seq 1200); do
    [ -e "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ] && return
    sleep 0.05
  done
}

args full
run "${ARGS[@]}" > "$dir/full.log" 2>&1 || { echo "FAIL: uninterrupted run"; cat "$dir/full.log"; exit 1; }

args stopped
# mpirun itself (not a function, which would run in a subshell) so that $! is what the signal goes to.
mpirun --oversubscribe -np 2 "$train" "${ARGS[@]}" > "$dir/stopped.log" 2>&1 &
pid=$!
wait_lines "$dir/stopped.jsonl" 5
kill -USR1 "$pid"
status=0
wait "$pid" || status=$?
[ "$status" -eq 0 ] || { echo "FAIL: the signalled job exited $status"; cat "$dir/stopped.log"; exit 1; }
line=$(grep -h "stopping after step" "$dir/stopped.log") || { echo "FAIL: no stop line"; cat "$dir/stopped.log"; exit 1; }
echo "$line"
grep -q "on SIGUSR1" <<<"$line" || { echo "FAIL: the stop line does not name SIGUSR1"; exit 1; }
stopped_at=$(sed -E 's/.*stopping after step ([0-9]+).*/\1/' <<<"$line")
[ "$stopped_at" -lt "$steps" ] || { echo "FAIL: the run was not cut short"; exit 1; }
[ -e "$dir/stopped/$(printf 'step-%08d' "$stopped_at")/manifest.json" ] || { echo "FAIL: no checkpoint of step $stopped_at"; exit 1; }

args stopped --resume
run "${ARGS[@]}" > "$dir/resumed.log" 2>&1 || { echo "FAIL: resume failed"; cat "$dir/resumed.log"; exit 1; }
grep -q "resumed from" "$dir/resumed.log" || { echo "FAIL: did not resume"; cat "$dir/resumed.log"; exit 1; }

losses() { grep -o '"loss":[^,]*' "$1"; }
[ "$(losses "$dir/full.jsonl" | wc -l)" -eq "$steps" ] || { echo "FAIL: the uninterrupted run logged too few steps"; exit 1; }
if ! diff <(losses "$dir/full.jsonl") <(losses "$dir/stopped.jsonl"); then
  echo "FAIL: the resumed run's losses differ from the uninterrupted run's"
  exit 1
fi
# A second signal does not wait for the step: the ranks exit at once, non-zero, saying so.
# Longer steps (a second or more), so that both signals land within one: the first goes 0.5 s after step 1's
# line, past the ranks' agreement on whether to stop after step 1 (a signal inside that window would stop the job
# cleanly before the second arrives), and the second 0.1 s later, inside step 2.
args twice --set train.steps=100000 --set data.seq_len=512 --set model.llm.num_layers=6
mpirun --oversubscribe -np 2 "$train" "${ARGS[@]}" > "$dir/twice.log" 2>&1 &
pid=$!
wait_lines "$dir/twice.jsonl" 1
sleep 0.5
kill -USR1 "$pid"
sleep 0.1
kill -USR1 "$pid"
status=0
wait "$pid" || status=$?
[ "$status" -ne 0 ] || { echo "FAIL: a second signal still exited 0"; cat "$dir/twice.log"; exit 1; }
grep -q "second stop signal, exiting now without a checkpoint" "$dir/twice.log" ||
  { echo "FAIL: the second signal is not reported"; cat "$dir/twice.log"; exit 1; }
echo "PASS: stopped after step $stopped_at of $steps on SIGUSR1, resumed, $steps losses identical; a second signal exits at once"
