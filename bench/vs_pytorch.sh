#!/usr/bin/env bash
# cornstarch against PyTorch eager on the same CPU, side by side: the W1/W2 workloads (configs/bench/) trained by
# cornstarch-train and by bench/pytorch_mllm.py (the same model, sample layout, threads and optimizer, in Debian's
# python3-torch), rotating which goes first, several rounds. PyTorch runs twice: as a user runs it (glibc malloc),
# and with tcmalloc preloaded, as PyTorch's CPU performance guides advise: glibc returns PyTorch's large tensors to
# the kernel on every free, and on a VM each new page then costs a fault (W1: ~35 s/step vs ~9). Prints one table:
# ms/step (median of the rounds, each round the median of its steps after the first, min-max over the rounds),
# tokens/s, peak resident memory, cornstarch's ratios to each PyTorch side, and the MFU cornstarch printed in each
# round (identical runs: how steady it is). Not part of CI (minutes per round).
#
#   bench/vs_pytorch.sh [ROUNDS [STEPS [THREADS]]]    defaults: 3 rounds, 4 steps (1 warm-up), every core
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
steps=${2:-4}
threads=${3:-$(nproc)}
python=/usr/bin/python3  # Debian's, which has python3-torch
"$python" -c "import torch" 2>/dev/null || { echo "vs_pytorch: needs Debian's python3-torch (apt-get install python3-torch)" >&2; exit 1; }
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
[[ -f $tcmalloc ]] || { echo "vs_pytorch: needs tcmalloc (apt-get install libtcmalloc-minimal4)" >&2; exit 1; }
bazel build //tools:cornstarch-train >/dev/null 2>&1 || { echo "vs_pytorch: the build failed" >&2; exit 1; }
train=bazel-bin/tools/cornstarch-train
out=$(mktemp -d)
echo "vs_pytorch: runs and logs in $out (removed when the table is printed)" >&2

cornstarch() {  # cornstarch WORKLOAD ROUND
  /usr/bin/time -f %M -o "$out/$1-cornstarch-$2.kib" "$train" --config "configs/bench/$1.yaml" \
    --set train.steps="$steps" --set train.num_threads="$threads" --set logging.interval=1000 \
    --set logging.metrics_path="$out/$1-cornstarch-$2.jsonl" > "$out/$1-cornstarch-$2.log" 2>&1
}
pytorch() {  # pytorch WORKLOAD ROUND [SIDE ENV...]
  local side=${3:-pytorch}
  env "${@:4}" /usr/bin/time -f %M -o "$out/$1-$side-$2.kib" "$python" bench/pytorch_mllm.py \
    --config "configs/bench/$1.yaml" --steps "$steps" --threads "$threads" > "$out/$1-$side-$2.jsonl" \
    2> "$out/$1-$side-$2.log"
}
tuned() {  # tuned WORKLOAD ROUND: PyTorch with tcmalloc
  pytorch "$1" "$2" pytorch+tcmalloc LD_PRELOAD="$tcmalloc"
}

sides=(cornstarch pytorch tuned)
for round in $(seq "$rounds"); do
  for w in w1 w2; do
    for i in 0 1 2; do "${sides[(round + i) % 3]}" "$w" "$round"; done  # each round starts with another side
    echo "round $round/$rounds: $w done" >&2
  done
done

grep -h "LibTorch" "$out/w1-cornstarch-1.log" | sed 's/.*info\] //' | head -1
"$python" - "$out" "$rounds" "$steps" "$threads" <<'EOF'
import json, statistics, sys, yaml
out, rounds, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def step_seconds(path, key):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    return [r[key] for r in rows if key in r][1:]  # the first step warms up

print(f"{rounds} alternating rounds x {steps - 1} measured steps, {threads} threads, fp32")
print(f"{'workload':8} {'side':16} {'ms/step':>9} {'min-max':>15} {'tok/s':>7} {'peak MiB':>9}")
sides = (("pytorch", "seconds"), ("pytorch+tcmalloc", "seconds"), ("cornstarch", "step_seconds"))
for w in ("w1", "w2"):
    cfg = yaml.safe_load(open(f"configs/bench/{w}.yaml"))
    tokens = cfg["data"]["seq_len"] * cfg["train"]["global_batch_size"]
    res = {}
    for side, key in sides:
        per_round = [statistics.median(step_seconds(f"{out}/{w}-{side}-{r}.jsonl", key)) for r in range(1, rounds + 1)]
        mem = max(int(open(f"{out}/{w}-{side}-{r}.kib").read().split()[-1]) for r in range(1, rounds + 1)) / 1024
        res[side] = (statistics.median(per_round), min(per_round), max(per_round), mem)
        med, lo, hi, _ = res[side]
        print(f"{w:8} {side:16} {med * 1e3:9.0f} {f'{lo * 1e3:.0f}-{hi * 1e3:.0f}':>15} {tokens / med:7.0f} {mem:9.0f}")
    mfu = [statistics.median(step_seconds(f"{out}/{w}-cornstarch-{r}.jsonl", "mfu")) for r in range(1, rounds + 1)]
    print(f"{w:8} cornstarch MFU (of the GEMM rate each run measures at start): {100 * statistics.median(mfu):.1f}%, "
          f"{100 * min(mfu):.1f}-{100 * max(mfu):.1f}% over the rounds")
    for base, _ in sides[:2]:
        print(f"{w:8} cornstarch vs {base}: {res[base][0] / res['cornstarch'][0]:.2f}x faster, "
              f"{res['cornstarch'][3] / res[base][3]:.2f}x the memory")
EOF
rm -rf "$out"
