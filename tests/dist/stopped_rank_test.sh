#!/usr/bin/env bash
# A stuck rank, as a user meets one: the trainer runs under mpirun, one rank is stopped with SIGSTOP after step 1,
# and the others, within parallel.timeout_seconds, end the job non-zero with a message naming the stopped world
# rank. Layouts: pp = 2 x dp = 2 with rank 3 stopped (pipeline messages and the dp sums), dp = 2, cp = 2 and tp = 2
# with rank 1 stopped.
#   stopped_rank_test.sh CORNSTARCH_TRAIN CONFIG
set -uo pipefail
train=$1
config=$2
dir="${TEST_TMPDIR:-/tmp}/stopped-rank"
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"  # OpenMPI's session directory stays in the sandbox
fail() { echo "FAIL: $*"; echo "--- output ---"; cat "$dir/out.log"; exit 1; }

# The pid of world rank $1 among this job's trainer processes.
pid_of_rank() {
  local pid
  for pid in $(pgrep -f "$train"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$pid"
      return
    fi
  done
}

check() {  # check NP STOPPED_RANK OVERRIDES...
  local np=$1 stopped=$2
  shift 2
  rm -rf "$dir"
  mkdir -p "$dir"
  local start=$SECONDS
  mpirun --oversubscribe -np "$np" "$train" --config "$config" --set train.steps=50 --set train.num_threads=1 \
    --set parallel.timeout_seconds=3 --set logging.interval=1 --set logging.metrics_path="$dir/metrics.jsonl" "$@" \
    >"$dir/out.log" 2>&1 &
  local job=$!
  for _ in $(seq 600); do
    grep -q '"step":1,' "$dir/metrics.jsonl" 2>/dev/null && break
    sleep 0.05
  done
  local pid
  pid=$(pid_of_rank "$stopped")
  [[ -n $pid ]] || fail "$*: no process for world rank $stopped"
  kill -STOP "$pid"
  for _ in $(seq 600); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$job" 2>/dev/null && { kill -9 "$pid" 2>/dev/null; wait "$job"; fail "$*: the job did not end within 60 s"; }
  wait "$job"
  local rc=$?
  kill -9 "$pid" 2>/dev/null
  [[ $rc -ne 0 ]] || fail "$*: exit code 0"
  grep -Eq "world rank $stopped (did not arrive|is stuck or dead)" "$dir/out.log" ||
    fail "$*: the stopped world rank $stopped is not named"
  echo "ok: $* (rank $stopped stopped): the job ended in $((SECONDS - start)) s naming world rank $stopped"
  grep -Em1 "world rank $stopped (did not arrive|is stuck or dead)" "$dir/out.log" | sed 's/^.*\] //'
}

check 4 3 --set parallel.pp=2 --set parallel.dp=2
check 2 1 --set parallel.pp=1 --set parallel.dp=2
check 2 1 --set parallel.pp=1 --set parallel.cp=2 --set parallel.cp_block=32
check 2 1 --set parallel.pp=1 --set parallel.tp=2
echo "PASS"
