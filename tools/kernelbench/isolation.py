"""Each problem converted in its own forked process under memory and time limits."""
import json
import os
import resource
import shutil
import signal
import sys
import time
import traceback

import torch

from .common import GIB, Skip, gib, task_name
from .convert import convert


# ---- isolation: one forked process per problem ---------------------------------------------------

def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def group_rss(pgid):
    """Resident bytes of every process of group `pgid` (the problem's process and what it started)."""
    total = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid:
                    total += rss_bytes(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return total


class ProblemTimeout(BaseException):
    """Raised by SIGALRM when one problem runs past --timeout (a BaseException, so the problem's
    own `except Exception` cannot swallow it)."""


def _on_alarm(signum, frame):
    raise ProblemTimeout()


def child(level, pid, path, o, wfd, parent):
    """Runs in the forked process: converts one problem, writes one JSON line, exits."""
    res = None
    try:
        os.setpgid(0, 0)
        try:  # killed with the importer (its own process group does not get the importer's signals)
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except Exception:
            pass
        if os.getppid() != parent:
            os._exit(1)
        limit = int(o.memory_gb * GIB + 4 * GIB)  # address space: the budget plus torch's mappings
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        torch.set_num_threads(max(1, o.threads))
        signal.signal(signal.SIGALRM, _on_alarm)
        if o.timeout > 0:
            signal.setitimer(signal.ITIMER_REAL, o.timeout)
        task, info = convert(level, pid, path, o.out, o)
        signal.setitimer(signal.ITIMER_REAL, 0)
        res = {"ok": task, "info": info}
    except ProblemTimeout:
        res = {"skip": f"took longer than --timeout {o.timeout:g} s"}
    except SystemExit as e:
        res = {"skip": f"the file calls exit({e.code!r})"}
    except Skip as e:
        res = {"skip": str(e)}
    except MemoryError:
        res = {"skip": f"out of memory under the {o.memory_gb:g} GiB budget"}
    except BaseException as e:
        msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if "can't allocate memory" in str(e) or "not enough memory" in str(e):
            res = {"skip": f"out of memory under the {o.memory_gb:g} GiB budget ({msg[:160]})"}
        else:
            res = {"skip": f"import failed: {msg[:300]}"}
            traceback.print_exc(limit=3)
    try:
        os.write(wfd, (json.dumps(res) + "\n").encode())
    finally:
        os._exit(0)


def run_isolated(level, pid, path, o):
    """Converts one problem in a forked process; returns {"ok": task, "info": {...}} or {"skip": reason}."""
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    cpid = os.fork()
    if cpid == 0:
        os.close(rfd)
        child(level, pid, path, o, wfd, parent)
    os.close(wfd)
    try:
        os.setpgid(cpid, cpid)
    except OSError:
        pass
    os.set_blocking(rfd, False)
    buf = b""
    start = time.monotonic()
    killed = None
    peak = 0
    limit = o.memory_gb * GIB
    hard = o.timeout + 15 if o.timeout > 0 else None
    status = None
    tick = 0
    while True:
        try:
            chunk = os.read(rfd, 65536)
            if chunk:
                buf += chunk
        except BlockingIOError:
            pass
        done, status = os.waitpid(cpid, os.WNOHANG)
        if done:
            break
        tick += 1
        r = group_rss(cpid) if tick % 10 == 0 else rss_bytes(cpid)
        peak = max(peak, r)
        if killed is None and r > limit:
            killed = f"used more than the {o.memory_gb:g} GiB budget ({gib(r)} resident; --memory-gb sets it); killed"
        elif killed is None and hard and time.monotonic() - start > hard:
            killed = f"took longer than --timeout {o.timeout:g} s (killed)"
        if killed:
            try:
                os.killpg(cpid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
    try:
        os.killpg(cpid, signal.SIGKILL)  # anything the problem started
    except OSError:
        pass
    while True:
        try:
            chunk = os.read(rfd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        buf += chunk
    os.close(rfd)
    for f in os.listdir(o.out):  # a killed conversion's temporary folder
        if f.startswith(f".tmp-{task_name(level, path)}-"):
            shutil.rmtree(os.path.join(o.out, f), ignore_errors=True)
    if killed:
        return {"skip": killed}
    line = buf.decode(errors="replace").strip().splitlines()
    if line:
        try:
            res = json.loads(line[-1])
            res.setdefault("info", {})["peak_rss"] = peak
            return res
        except ValueError:
            pass
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGKILL:
            return {"skip": f"killed by SIGKILL (the kernel's OOM killer?) at {gib(peak)} resident"}
        return {"skip": f"crashed with signal {signal.Signals(sig).name}"}
    return {"skip": f"the conversion ended without a result (exit status {os.WEXITSTATUS(status)})"}
