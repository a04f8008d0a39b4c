"""The command line: arguments, the problem loop, skipped.yaml and set.yaml."""
import argparse
import hashlib
import os
import re
import shutil
import sys
import time

import torch

from .common import GIB, IMPORTER_VERSION, LEVEL_TIMEOUT, task_name, yaml_str
from .source import find_problems
from .problem import _Live
from .isolation import run_isolated
from .resume import RETRIED_SKIPS, folder_bytes, read_skipped, read_task_source, still_current, write_atomic


def default_memory_gb():
    """Half the machine's memory (MemTotal, not what is free now: the same command gets the same
    budget, so a rerun keeps its skips)."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                return round(max(1.0, 0.5 * int(line.split()[1]) * 1024 / GIB), 1)
    except OSError:
        pass
    return 8.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kb_dir")
    ap.add_argument("--out", required=True)
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds one problem may take (running its Model included); 0 = no limit; default by "
                         "level: " + ", ".join(f"{k}: {v} s" for k, v in LEVEL_TIMEOUT.items()) + ", others 300 s")
    ap.add_argument("--memory-gb", type=float, default=0,
                    help="memory budget of one problem's conversion in GiB (0 = half the machine's memory)")
    ap.add_argument("--cpu-ms", type=float, default=100, help="target time of the reference at the cpu sizes, one core")
    ap.add_argument("--threads", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    ap.add_argument("--force", action="store_true", help="redo problems already imported or skipped")
    o = ap.parse_args()
    if not os.path.isdir(o.kb_dir):
        sys.stderr.write(f"kernelbench_import: {o.kb_dir} is not a folder\n")
        sys.exit(2)
    try:
        levels = {int(x) for x in o.levels.split(",") if x.strip()}
    except ValueError:
        sys.stderr.write(f"kernelbench_import: --levels {o.levels}: expected comma-separated integers\n")
        sys.exit(2)
    if o.memory_gb < 0 or o.cpu_ms <= 0:
        sys.stderr.write("kernelbench_import: --memory-gb must be >= 0 and --cpu-ms > 0\n")
        sys.exit(2)
    if o.memory_gb == 0:
        o.memory_gb = default_memory_gb()
    problems = find_problems(o.kb_dir, levels)
    if not problems:
        sys.stderr.write(f"kernelbench_import: no problem files (<id>_<Name>.py) under {o.kb_dir}"
                         f" (nor KernelBench/level<N>/ for levels {o.levels})\n")
        sys.exit(2)
    os.makedirs(o.out, exist_ok=True)
    for f in os.listdir(o.out):  # temporary folders of a killed import
        if f.startswith(".tmp-"):
            shutil.rmtree(os.path.join(o.out, f), ignore_errors=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # Load what the meta analysis imports (torch._dynamo, the FLOP counter: seconds) once, before
    # the forks, instead of in every problem's process. Meta tensors start no threads.
    from torch.utils.flop_counter import FlopCounterMode
    with torch.device("meta"):
        lin, xin = torch.nn.Linear(4, 4), torch.randn(2, 4)
    with torch.no_grad(), FlopCounterMode(display=False), _Live():
        lin(xin)
    timeout_arg = o.timeout
    timeouts = f"{timeout_arg:g} s" if timeout_arg is not None else \
        ", ".join(f"level {k}: {v} s" for k, v in LEVEL_TIMEOUT.items())
    print(f"importing {len(problems)} problems into {o.out} (memory budget {o.memory_gb:g} GiB per problem, "
          f"timeout {timeouts}, cpu sizes for {o.cpu_ms:g} ms)", flush=True)
    skipped_path = os.path.join(o.out, "skipped.yaml")
    old_skips = {} if o.force else read_skipped(skipped_path)
    skipped = {}  # rel -> (level, pid, key, reason)
    in_run = {os.path.relpath(path, o.kb_dir) for _, _, path in problems}
    for line in ([] if o.force else open(skipped_path, encoding="utf-8") if os.path.exists(skipped_path) else []):
        m = re.search(r'file: "([^"]*)", level: (\w+), problem_id: (\d+)', line)
        if m and m.group(1) not in in_run and m.group(1) in old_skips:  # other levels' skips stay listed
            lv = None if m.group(2) == "null" else int(m.group(2))
            skipped[m.group(1)] = (lv, int(m.group(3)), *old_skips[m.group(1)])
    set_yaml = os.path.join(o.out, "set.yaml")
    write_atomic(set_yaml, "name: kernelbench\ndescription: " +
                 yaml_str(f"KernelBench problems imported from {os.path.abspath(o.kb_dir)}") + "\n")
    n_done = n_kept = 0
    t_all = time.monotonic()

    def write_skipped():
        text = "# KernelBench problems that were not converted, with the reason (tools/kernelbench_import.py)\n"
        rows = [(rel, *v) for rel, v in skipped.items()]
        text += "skipped:\n" if rows else "skipped: []\n"
        for rel, level, pid, key, reason in rows:
            text += (f"  - {{file: {yaml_str(rel)}, level: {level if level is not None else 'null'}, "
                     f"problem_id: {pid}, key: {yaml_str(key)}, reason: {yaml_str(reason)}}}\n")
        write_atomic(skipped_path, text)

    for level, pid, path in problems:
        rel = os.path.relpath(path, o.kb_dir)
        o.timeout = timeout_arg if timeout_arg is not None else LEVEL_TIMEOUT.get(level, 300)
        settings = f"m{o.memory_gb:g}-t{o.timeout:g}-c{o.cpu_ms:g}"
        raw = open(path, "rb").read()
        sha = hashlib.sha256(raw).hexdigest()
        key = f"{sha[:16]}-v{IMPORTER_VERSION}-s{o.seed}"
        task = task_name(level, path)
        tdir = os.path.join(o.out, task)
        if not o.force:
            src = raw.decode("utf-8", errors="replace")
            s = read_task_source(tdir)
            if s:
                s["_dir"] = tdir
            if s and s.get("sha256") == sha and s.get("seed") == str(o.seed) and \
                    re.fullmatch(r"\d+", s.get("importer", "")) and still_current(int(s["importer"]), src, o, task=s):
                n_kept += 1
                print(f"kept  {rel} -> {task} (imported before from the same source)", flush=True)
                continue
            prev = old_skips.get(rel)
            m = re.fullmatch(r"([0-9a-f]{16})-v(\d+)-s(-?\d+)-(.*)", prev[0]) if prev else None
            if m and m.group(1) == sha[:16] and m.group(3) == str(o.seed) and m.group(4) == settings and \
                    not prev[1].startswith(RETRIED_SKIPS) and still_current(int(m.group(2)), src, o, skip_reason=prev[1]):
                skipped[rel] = (level, pid, prev[0], prev[1])
                print(f"kept  {rel}: skipped before ({prev[1]})", flush=True)
                write_skipped()
                continue
        if level == 4:
            res = {"skip": "level 4 problems need Hugging Face model downloads (out of scope)"}
        else:
            t0 = time.monotonic()
            res = run_isolated(level, pid, path, o)
            res.setdefault("info", {})["seconds"] = round(time.monotonic() - t0, 1)
        if "ok" in res:
            n_done += 1
            skipped.pop(rel, None)
            inf = res["info"]
            extra = ", ".join(f"{k} {v}" for k, v in inf.items() if k in ("traced_at", "cpu_ms", "cpu_sizes", "batch_norm", "slow_factor", "unbaked_devices", "seconds", "peak_rss") and v is not None)
            slow = inf.get("cpu_ms")
            note = f"; its reference takes {slow} ms at the cpu sizes, over the --cpu-ms target of {o.cpu_ms:g}" \
                if isinstance(slow, (int, float)) and slow > 2 * o.cpu_ms else ""
            print(f"ok    {rel} -> {res['ok']} ({extra}){note}", flush=True)
        else:
            if os.path.isdir(tdir):  # an older import (another source, version or --force): stale now
                shutil.rmtree(tdir, ignore_errors=True)
            skipped[rel] = (level, pid, f"{key}-{settings}", res["skip"])
            secs = res.get("info", {}).get("seconds")
            print(f"skip  {rel}: {res['skip']}" + (f" ({secs} s)" if secs is not None else ""), flush=True)
        write_skipped()
    write_skipped()
    size = folder_bytes(o.out)
    print(f"{n_done} problems imported, {n_kept} kept from before, {len(skipped)} skipped into {o.out} "
          f"in {time.monotonic() - t_all:.0f} s; folder size {size / 1e6:.1f} MB"
          + (f" (reasons in {skipped_path})" if skipped else ""), flush=True)
