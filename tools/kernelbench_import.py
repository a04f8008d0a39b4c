#!/usr/bin/env python3
"""Converts KernelBench problem files into leap task folders (run by `leap tasks import kernelbench`).

Usage: kernelbench_import.py KB_DIR --out DIR [--levels 1,2,3] [--seed 42] [--atol 1e-4] [--rtol 1e-4]
                             [--timeout 300] [--memory-gb G] [--cpu-ms 100] [--force]
KB_DIR is a KernelBench checkout (holding KernelBench/level<N>/) or any folder of `<id>_<Name>.py`
problem files (a folder named level<N> gives level N; another folder gives no level).

Each problem is converted in its own forked process under a memory limit (RLIMIT_AS and a watch on
its resident memory, both from --memory-gb) and a time limit (--timeout); a crash, an OOM kill or a
timeout is a skip with its reason, and the import goes on. Task folders are written under a
temporary name and renamed when complete; skipped.yaml and set.yaml are rewritten after every
problem, so an import that is killed keeps what it wrote, and running the same command again
resumes: problems already imported (or skipped with the same settings) from the same source hash
are kept, `--force` redoes them.

Per problem (docs/kernelbench.md has the details):
- size symbols are the problem's module-level integer constants; the problem is analysed on the
  meta device at KernelBench's sizes (shapes, bytes, FLOPs, peak memory: nothing allocated); when
  its tensors would not fit the budget (or its runs the timeout), it is traced and checked at
  scaled-down values of the same symbols (the module re-executed with those assignments changed);
  the task's shapes are symbolic, so its full-size shapes come from the symbols;
- `sizes` are KernelBench's values, `sizes_cpu` smaller values (halving, divisibility and every
  dimension above 1 kept) at which the reference runs within --cpu-ms on one core; the trace is
  checked against eager PyTorch at the sizes it was traced at and at the cpu sizes;
- parameters and buffers become explicit inputs; values that match a constant, a uniform or a
  normal distribution are generated from a seed by LibTorch's generator (task.yaml
  `init: {uniform: ..., seed: N}`; the C++ import checks that LibTorch reproduces them), others are
  saved as raw little-endian files;
- batch norm in training mode is imported with a batch-statistics reference (its running
  statistics, which the training-mode output never reads, are dropped);
- device constants of the trace (tensors made in forward) follow the first input's device;
  `randint` bounds that follow a size symbol are written as that symbol.
Resume across versions: CHANGES / still_current() say which older records a version redoes.
Exit status: 0 (some or no problems skipped), 2 bad usage, 4 torch missing.
"""
import os
import sys

try:
    import torch  # noqa: F401
except ImportError as e:  # the C++ command turns exit 4 into a clear message
    sys.stderr.write(f"kernelbench_import: cannot import torch ({e}); run scripts/setup.sh or set LEAP_PYTHON\n")
    sys.exit(4)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernelbench.cli import main  # noqa: E402  (the package beside this script: tools/kernelbench/)

if __name__ == "__main__":
    main()
