#!/usr/bin/env python3
"""Checks a generated task set (`leap tasks generate`) against PyTorch itself, independently of leap.

For every task folder under SET_DIR: runs the prompt's PyTorch `Model` (whatever spelling it uses)
and the task's TorchScript reference on the prompt's own get_inputs() (several seeds, also scaled
by 100), and checks that they agree (allclose at the task's tolerance) and that the declared output
shape matches. Prints one line per task and exits 1 if any task disagrees.

Usage: python tools/check_generated_prompts.py SET_DIR
"""
import pathlib
import sys

import torch
import yaml


def check(task_dir: pathlib.Path) -> str:
    spec = yaml.safe_load((task_dir / "task.yaml").read_text())
    scope: dict = {}
    exec(compile(spec["prompt"], str(task_dir / "task.yaml") + ":prompt", "exec"), scope)
    model = scope["Model"](*scope["get_init_inputs"]())
    ref = torch.jit.CompilationUnit(spec["reference"]["torchscript"]).reference
    tol = spec.get("tolerance", {})
    sizes = spec["sizes"]
    out_shape = [sizes[d] if isinstance(d, str) else d for d in spec["outputs"]["y"]["shape"]]
    for seed in range(3):
        for scale in (1.0, 100.0):
            torch.manual_seed(seed)
            inputs = [t * scale for t in scope["get_inputs"]()]
            with torch.no_grad():
                got = model(*[t.clone() for t in inputs])
                want = ref(*[t.clone() for t in inputs])
            if list(got.shape) != out_shape or list(want.shape) != out_shape:
                return f"shape: prompt {list(got.shape)}, reference {list(want.shape)}, declared {out_shape}"
            if not torch.allclose(got, want, atol=tol.get("atol", 1e-4) * scale, rtol=tol.get("rtol", 1e-4)):
                err = (got - want).abs().max().item()
                return f"prompt and reference differ (seed {seed}, scale {scale}): max abs error {err:g}"
    return ""


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1])
    bad = 0
    tasks = sorted(p.parent for p in root.glob("*/task.yaml"))
    for t in tasks:
        why = check(t)
        print(("FAIL " if why else "ok   ") + t.name + (": " + why if why else ""))
        bad += bool(why)
    print(f"{len(tasks)} tasks, {bad} disagree")
    return 1 if bad or not tasks else 0


if __name__ == "__main__":
    sys.exit(main())
