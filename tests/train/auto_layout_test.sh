#!/usr/bin/env bash
# parallel.auto with the real binaries: a 2-rank job trains on the layout that cornstarch-plan --auto ranks first
# for 2 ranks of the same config and cluster, says so on rank 0 only, and finishes its steps. Then with
# cluster.measure (the default) it plans on this machine as measured at start, says what it measured, and trains.
#   auto_layout_test.sh CORNSTARCH_TRAIN CORNSTARCH_PLAN CONFIG
set -euo pipefail
train=$1
plan=$2
config=$3
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"  # OpenMPI's session directory stays in the sandbox
dir="$TMPDIR/auto-layout"
rm -rf "$dir"
mkdir -p "$dir"
fail() { echo "FAIL: $*"; echo "--- output ---"; cat "$dir/train.log"; exit 1; }
# A CPU-like cluster: slow ranks, slow links; as given, not measured.
cluster=(--set cluster.tflops=0.05 --set cluster.gpus_per_node=2 --set cluster.intra_node_gbps=5
  --set cluster.inter_node_gbps=1 --set cluster.measure=false)

"$plan" --auto --ranks 2 --config "$config" "${cluster[@]}" --emit "$dir/best.yaml" > "$dir/plan.log"
best=$(sed -n '1s/^# cornstarch-plan --auto --ranks 2: \(.*\), predicted .*$/\1/p' "$dir/best.yaml")
[[ -n $best ]] || { cat "$dir/best.yaml"; echo "FAIL: no layout in the emitted YAML"; exit 1; }

timeout 300 mpirun --oversubscribe -np 2 "$train" --config "$config" "${cluster[@]}" --set parallel.auto=true \
  --set train.steps=3 --set optimizer.warmup_steps=1 --set train.num_threads=1 --set logging.metrics_path= \
  > "$dir/train.log" 2>&1 || fail "the job failed"
n=$(grep -c "parallel.auto: $best of [0-9]* layouts for 2 ranks" "$dir/train.log" || true)
((n == 1)) || fail "expected one 'parallel.auto: $best' line (rank 0's), found $n"
grep -q "runner-up" "$dir/train.log" || fail "the runner-up is not reported"
grep -q "step 3/3" "$dir/train.log" || fail "the job did not reach step 3"
grep -q "this machine measured" "$dir/train.log" && fail "cluster.measure=false measured the machine"

timeout 300 mpirun --oversubscribe -np 2 "$train" --config "$config" --set parallel.auto=true --set train.steps=3 \
  --set optimizer.warmup_steps=1 --set train.num_threads=1 --set logging.metrics_path= > "$dir/train.log" 2>&1 ||
  fail "the measuring job failed"
n=$(grep -c "parallel.auto: this machine measured: fp32 GEMM [0-9.]* GFLOP/s per rank, all-reduce [0-9.]* GB/s, \
latency [0-9]* us, 2 ranks per node" "$dir/train.log" || true)
((n == 1)) || fail "expected one line (rank 0's) saying what was measured, found $n"
grep -q "parallel.auto: .* of [0-9]* layouts for 2 ranks" "$dir/train.log" || fail "no layout chosen"
grep -q "step 3/3" "$dir/train.log" || fail "the measuring job did not reach step 3"
echo "PASS: trained on $best as given; measured: $(grep -o 'this machine measured: .*' "$dir/train.log")"
