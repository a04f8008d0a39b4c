#!/usr/bin/env python3
"""Eager PyTorch outputs of imported KernelBench tasks at their cpu sizes, for comparison with
leap's references (tests/test_kernelbench_scale.cpp; docs/kernelbench.md).

Usage: kernelbench_eager.py KB_DIR OUT_DIR TASK_DIR...
For each task folder (imported by tools/kernelbench_import.py), the problem file named by its
`source.file` (under KB_DIR, or KB_DIR/KernelBench) is executed with its size symbols set to the
task's cpu sizes (`source.cpu_overrides`), its Model built and its get_inputs() called under the
task's seed, its parameters and buffers replaced by the task's fixed values (seeded ones drawn as
LibTorch draws them, files read), and forward run eagerly. Written to OUT_DIR/<task>/:
`in<i>.bin` (the tensor inputs, raw, in task order), `out<j>.bin` (the outputs, float64 for
floating outputs) and `shapes.txt`. A task that fails prints `fail <task>: reason`.
"""
import os
import sys

import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernelbench.problem import Problem, flat_outputs  # noqa: E402
from kernelbench.values import generate, weight_names  # noqa: E402


def overrides_of(src_meta):
    text = str(src_meta.get("cpu_overrides", "") or "")
    out = {}
    for part in text.split(","):
        if "=" in part:
            k, v = part.split("=")
            out[k.strip()] = int(v)
    return out


def one(kb_dir, out_dir, tdir):
    spec = yaml.safe_load(open(os.path.join(tdir, "task.yaml"), encoding="utf-8"))
    meta = spec["source"]
    path = os.path.join(kb_dir, meta["file"])
    if not os.path.exists(path):
        path = os.path.join(kb_dir, "KernelBench", meta["file"])
    if not os.path.exists(path):
        path = os.path.join(kb_dir, os.path.basename(meta["file"]))
    src = open(path, encoding="utf-8").read()
    seed = int(meta["seed"])
    P = Problem(path, src, overrides_of(meta) or None, seed)
    # weight names as the importer gives them
    by_name = {w: k for k, w in weight_names(P.names, P.state).items()}
    weights = dict(P.state)
    tensor_names = [P.names[i] for i in P.tensor_idx]
    ins = []
    for name, d in spec["inputs"].items():
        if name in tensor_names:
            ins.append(P.tensors[tensor_names.index(name)])
            continue
        k = by_name[name]
        v = P.state[k]
        init = d["init"]
        if "file" in init:
            t = torch.from_file(os.path.join(tdir, init["file"]), size=v.numel(), dtype=v.dtype).reshape(v.shape)
        else:
            kind = "uniform" if "uniform" in init else "normal"
            a, b = (init[kind]["low"], init[kind]["high"]) if kind == "uniform" else (init[kind]["mean"], init[kind]["std"])
            t = generate((kind, float(a), float(b)), v.shape, int(init["seed"]), v.dtype)
        weights[k] = t
    with torch.no_grad():
        outs = flat_outputs(P.call([t.clone() for t in P.tensors], weights))
    d = os.path.join(out_dir, spec["name"])
    os.makedirs(d, exist_ok=True)
    shapes = []
    for i, t in enumerate(ins):
        t.contiguous().numpy().tofile(os.path.join(d, f"in{i}.bin")) if t.dtype != torch.bool else \
            t.contiguous().to(torch.uint8).numpy().tofile(os.path.join(d, f"in{i}.bin"))
        shapes.append("in " + " ".join(str(x) for x in t.shape))
    for j, t in enumerate(outs):
        (t.double() if t.is_floating_point() else t).contiguous().numpy().tofile(os.path.join(d, f"out{j}.bin"))
        shapes.append("out " + " ".join(str(x) for x in t.shape))
    open(os.path.join(d, "shapes.txt"), "w").write("\n".join(shapes) + "\n")


def main():
    if len(sys.argv) < 4:
        sys.stderr.write(__doc__)
        sys.exit(2)
    kb_dir, out_dir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    for tdir in sys.argv[3:]:
        try:
            one(kb_dir, out_dir, tdir)
            print(f"ok   {os.path.basename(os.path.normpath(tdir))}", flush=True)
        except Exception as e:
            print(f"fail {os.path.basename(os.path.normpath(tdir))}: {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    main()
