"""Resuming an import: which earlier records a version keeps, reading what was written."""
import ast
import os
import re

from .common import IMPORTER_VERSION
from .source import _unpacked_targets, base_symbols, sequence_literal
from .tracing import saved_device_constants


# ---- the import: resume, record, report ----------------------------------------------------------

def _changed_in_v4(src, task, skip_reason, o):
    """Whether version 4 may convert this problem differently from version 3: a `randint` input
    (its bounds now follow the size symbols), or a tuple-unpacked size assignment (`a, b = 16, 32`,
    now size symbols) in a problem that version 3 skipped or left without cpu sizes within
    --cpu-ms (the problems the new symbols can change)."""
    if "randint" in src:
        return True
    try:
        unpacked = any(_unpacked_targets(n) for n in ast.parse(src).body)
    except SyntaxError:
        return False
    if not unpacked:
        return False
    if skip_reason is not None:
        return True
    ms = task.get("cpu_reference_ms")
    try:
        slow = ms is None or float(ms) > o.cpu_ms
    except ValueError:
        slow = True
    return slow or "cpu_sizes" in task


def _changed_in_v5(src, task, skip_reason, o):
    """Whether version 5 may convert this problem differently from version 4: a task whose stored
    reference has a device written into it (version 5 traces follow their inputs' device)."""
    return skip_reason is None and "_dir" in task and saved_device_constants(os.path.join(task["_dir"], "reference.pt"))


def _changed_in_v6(src, task, skip_reason, o):
    """Whether version 6 may convert this problem differently from version 5: a task left without
    cpu sizes because the trace failed the check at them (version 6 records which check failed;
    earlier states of version 3 wrote some of these, e.g. a transposed 3-D convolution that now
    gets cpu sizes)."""
    note = task.get("cpu_sizes", "")
    return skip_reason is None and ("bakes in its sizes" in note or "does not run at other sizes" in note)


def _changed_in_v7(src, task, skip_reason, o):
    """Whether version 7 may convert this problem differently from version 6: a dim named by a
    symbol of equal value that does not follow it at other sizes is now fitted as a derived dim,
    so the skips and cpu-size failures for shapes that do not follow the symbols are redone."""
    if skip_reason is not None:
        return "do not follow its size symbols" in skip_reason or "cannot be trusted" in skip_reason
    return "bakes in its sizes" in task.get("cpu_sizes", "")


# version -> the test of a record of the version before it (changed: redo; else keep)
def _changed_in_v8(src, task, skip_reason, o):
    """Version 8 (problems too large or slow for the CPU checks are imported for the GPU at
    KernelBench's sizes, traced on the meta device; level 3's longer timeout; einops installed)
    can turn any skip into a task; tasks it keeps are converted the same way."""
    return skip_reason is not None


def _changed_in_v9(src, task, skip_reason, o):
    """Version 9 (a problem for the GPU only is traced on the CPU within a leaner memory estimate,
    one copy of its inputs and weights) can turn a skip into a task; tasks are converted the same way."""
    return skip_reason is not None


def _changed_in_v10(src, task, skip_reason, o):
    """Whether version 10 may convert this problem differently from version 9: a value that several
    size symbols share (each dim is now named by the symbol it follows), a repeated list of sizes
    (`[1024] * 16`, now sizes), or a tuple or list of sizes (its elements no longer count as
    divisors the problem relies on)."""
    try:
        tree = ast.parse(src)
        symbols = base_symbols(src)
    except SyntaxError:
        return False
    if len(set(symbols.values())) < len(symbols):
        return True
    return any(isinstance(n, ast.Assign) and sequence_literal(n.value) is not None for n in tree.body)


CHANGES = {4: _changed_in_v4, 5: _changed_in_v5, 6: _changed_in_v6, 7: _changed_in_v7, 8: _changed_in_v8,
           9: _changed_in_v9, 10: _changed_in_v10}
OLDEST_KEPT = 3  # records of older versions are always redone


# Skips a later run tries again: a crash of the problem's process (a signal: a segfault inside torch
# seen once under load and not again, or the kernel's OOM killer acting for another process) says
# nothing certain about the problem. (A budget or timeout skip is the problem's own measure under
# the same settings: kept.)
RETRIED_SKIPS = ("crashed with signal",)


def still_current(version, src, o, task=None, skip_reason=None):
    """Whether an import record (a task's `source:` mapping, or a skip's reason) written by importer
    `version` is what this version would write: the same version, or an older one (from
    OLDEST_KEPT) that none of the CHANGES since affects. So a change that touches a few problems
    redoes only those."""
    if version == IMPORTER_VERSION:
        return True
    if version < OLDEST_KEPT or version > IMPORTER_VERSION:
        return False
    return not any(CHANGES[v](src, task or {}, skip_reason, o) for v in range(version + 1, IMPORTER_VERSION + 1))


def read_task_source(tdir):
    """{key: value} of the `source:` block of an imported task.yaml (read as text: no yaml module)."""
    out = {}
    try:
        lines = open(os.path.join(tdir, "task.yaml"), encoding="utf-8").read().split("\n")
    except OSError:
        return None
    inside = False
    for line in lines:
        if line == "source:":
            inside = True
            continue
        if inside:
            m = re.match(r"^  (\w+): (.*)$", line)
            if not m:
                break
            v = m.group(2)
            if v.startswith('"'):
                v = v[1:-1]
            out[m.group(1)] = v
    return out


def read_skipped(path):
    out = {}
    try:
        for line in open(path, encoding="utf-8"):
            m = re.search(r'file: "([^"]*)".*key: "([^"]*)".*reason: "(.*)"}\s*$', line)
            if m:
                out[m.group(1)] = (m.group(2), m.group(3).replace('\\"', '"').replace("\\\\", "\\"))
    except OSError:
        pass
    return out


def write_atomic(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def folder_bytes(d):
    total = 0
    for root, _, files in os.walk(d):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total
