#!/usr/bin/env python3
"""leap's KernelBench references (TorchScript, fusers off, as env::compile_reference runs them)
against the problems' own eager PyTorch Model: time per call, alternating the two sides.

Usage: kb_reference_eager.py KB_DIR TASKS_DIR [--device cpu|cuda] [--sample 20] [--rounds 9] [--threads 1]

KB_DIR is the KernelBench checkout the tasks were imported from (tools/kernelbench_import.py),
TASKS_DIR the imported set. A sample of --sample tasks spread evenly over the set (on the cpu, only
tasks with cpu sizes, run at those sizes; on cuda, KernelBench's sizes). Per task: the Model built
as the importer builds it, its inputs from get_inputs(), the reference.pt called with the same
tensors and the Model's parameters; three warm-up calls each, then --rounds rounds of A (eager)
and B (reference), alternating, each round the median of as many calls as fill about 50 ms
(device synchronised around each call on cuda). Prints each task's median times and the median of
its per-round ratios reference / eager with their range, then the median over tasks. A ratio
below 1 means leap's reference is faster than eager PyTorch (its speedups would then be smaller
than KernelBench's for the same kernel).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import kernelbench_eager as ke  # noqa: E402
from kernelbench.problem import Problem  # noqa: E402
from kernelbench.values import weight_names  # noqa: E402


def unfused():
    """The switches env::use_unfused_references sets in leap."""
    torch._C._jit_set_texpr_fuser_enabled(False)
    torch._C._jit_override_can_fuse_on_cpu(False)
    torch._C._jit_override_can_fuse_on_gpu(False)


def timer(fn, device):
    def once():
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3
    return once


def one(kb_dir, tdir, device, rounds):
    spec = yaml.safe_load(open(os.path.join(tdir, "task.yaml"), encoding="utf-8"))
    meta = spec["source"]
    path = os.path.join(kb_dir, meta["file"])
    if not os.path.exists(path):
        path = os.path.join(kb_dir, "KernelBench", meta["file"])
    src = open(path, encoding="utf-8").read()
    over = ke.overrides_of(meta) if device == "cpu" else {}
    P = Problem(path, src, over or None, int(meta["seed"]))
    model = P.model.to(device)
    tensors = [t.to(device) for t in P.tensors]
    state = {k: v.to(device) for k, v in P.state.items()}
    by_name = {w: k for k, w in weight_names(P.names, P.state).items()}
    names = [P.names[i] for i in P.tensor_idx]
    args = [tensors[names.index(n)] if n in names else state[by_name[n]] for n in spec["inputs"]]
    ref = torch.jit.load(os.path.join(tdir, "reference.pt"), map_location=device)
    raw = list(P.raw_inputs)
    for i, t in zip(P.tensor_idx, tensors):
        raw[i] = t
    eager = timer(lambda: model(*raw), device)
    script = timer(lambda: ref(*args), device)
    with torch.no_grad():
        for _ in range(3):
            eager()
            script()
        n = max(1, min(200, int(50 / max(1e-3, statistics.median([eager() for _ in range(3)])))))
        a_ms, b_ms, ratios = [], [], []
        for _ in range(rounds):  # A B A B ...
            a = statistics.median([eager() for _ in range(n)])
            b = statistics.median([script() for _ in range(n)])
            a_ms.append(a)
            b_ms.append(b)
            ratios.append(b / a)
    return statistics.median(a_ms), statistics.median(b_ms), statistics.median(ratios), min(ratios), max(ratios)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kb_dir")
    ap.add_argument("tasks_dir")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--sample", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    o = ap.parse_args()
    torch.set_num_threads(o.threads)
    unfused()
    dirs = []
    for name in sorted(os.listdir(o.tasks_dir)):
        f = os.path.join(o.tasks_dir, name, "task.yaml")
        if not os.path.exists(f):
            continue
        if o.device == "cpu" and "sizes_cpu: none" in open(f, encoding="utf-8").read():
            continue
        dirs.append(os.path.join(o.tasks_dir, name))
    if not dirs:
        sys.exit(f"kb_reference_eager: no task folders under {o.tasks_dir}")
    step = max(1, len(dirs) // o.sample)
    sample = dirs[::step][:o.sample]
    print(f"{len(sample)} of {len(dirs)} tasks on {o.device} ({o.threads} thread(s)), {o.rounds} rounds A B A B ...")
    print(f"{'task':44} {'eager ms':>10} {'reference ms':>13} {'ratio':>7}  range")
    meds = []
    for d in sample:
        name = os.path.basename(d)
        try:
            a, b, r, lo, hi = one(o.kb_dir, d, o.device, o.rounds)
        except Exception as e:
            print(f"{name:44} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        meds.append(r)
        print(f"{name:44} {a:10.3f} {b:13.3f} {r:7.3f}  [{lo:.3f}, {hi:.3f}]", flush=True)
    if meds:
        print(f"median ratio reference / eager over {len(meds)} tasks: {statistics.median(meds):.3f} "
              f"(range of the task medians [{min(meds):.3f}, {max(meds):.3f}])")


if __name__ == "__main__":
    main()
