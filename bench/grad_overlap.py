#!/usr/bin/env python3
"""How much of the data-parallel gradient sync a traced run hid under backward, read off its trace.

Reads the Chrome-trace JSON that `logging.trace_path` writes and prints, per rank and traced step, how many gradient
buckets started their reduction before the step's last backward ended, and when the last one was seen complete
(the "gradient buckets" track's spans end when GradSync::Finish found them done: an upper bound). Not part of CI.

    mpirun -np 2 bazel-bin/tools/cornstarch-train --set parallel.dp=2 --set logging.trace_path=/tmp/t.json ...
    bench/grad_overlap.py /tmp/t.json
"""
import json
import sys


def main(path):
    trace = json.load(open(path))
    spans = [e for e in (trace["traceEvents"] if isinstance(trace, dict) else trace) if e.get("ph") == "X"]
    step_of = lambda e: e.get("args", {}).get("step")
    for rank in sorted({e["pid"] for e in spans}):
        mine = [e for e in spans if e["pid"] == rank]
        for step in sorted({step_of(e) for e in mine if step_of(e) is not None}):
            # Actions print as "<stage><type><microbatch>": backwards are "0B3", "1B0", ...
            backward = [e for e in mine if e["tid"] == 0 and step_of(e) == step and e["name"][1:2] == "B"]
            buckets = [e for e in mine if e["tid"] == 1 and step_of(e) == step]
            if not backward or not buckets:
                continue
            end = max(e["ts"] + e["dur"] for e in backward)
            early = sum(1 for e in buckets if e["ts"] < end)
            done = max(e["ts"] + e["dur"] for e in buckets)
            print(f"rank {rank} step {step}: {early} of {len(buckets)} buckets started under backward; the last "
                  f"backward ended at {end / 1e3:.1f} ms, the last bucket was seen done {(done - end) / 1e3:.1f} ms later")


if __name__ == "__main__":
    main(sys.argv[1])
