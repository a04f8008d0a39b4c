#!/usr/bin/env python3
"""Writes a leap run's scalars as TensorBoard event files (`leap export --format tensorboard`).

Usage: tensorboard_export.py --scalars FILE --out DIR
FILE is the JSON leap writes: {"run": ID, "config_yaml": TEXT, "scalars": [{"tag", "step",
"value", "wall_time"}, ...]}. The events go to DIR/<run id>/ (so `tensorboard --logdir DIR`
overlays every run exported there), written through torch.utils.tensorboard.SummaryWriter into a
temporary folder that replaces DIR/<run id> only when complete. Exit 4 when torch or tensorboard
is missing, 2 on bad input.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scalars", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:  # torch or the tensorboard package
        print(f"tensorboard_export: {e} (scripts/setup.sh installs torch and tensorboard into .venv)", file=sys.stderr)
        return 4
    try:
        with open(a.scalars, encoding="utf-8") as f:
            data = json.load(f)
        run = str(data["run"])
        scalars = data["scalars"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"tensorboard_export: {a.scalars}: not leap's scalar file ({e})", file=sys.stderr)
        return 2
    if not run or "/" in run or run.startswith("."):
        print(f"tensorboard_export: {a.scalars}: bad run id {run!r}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{run}.tmp-", dir=a.out)
    try:
        w = SummaryWriter(log_dir=tmp)
        if data.get("config_yaml"):
            w.add_text("config", "```\n" + data["config_yaml"] + "\n```", global_step=0)
        n = 0
        for s in scalars:
            v = s["value"]
            if v is None or not math.isfinite(float(v)):
                continue
            w.add_scalar(s["tag"], float(v), global_step=int(s["step"]), walltime=float(s["wall_time"]))
            n += 1
        w.close()
        # mkdtemp made an owner-only folder: give it the permissions of any folder this user
        # creates (umask), so that TensorBoard run by another user can read it.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        for root, dirs, files in os.walk(tmp):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o777 & ~umask)
            for f in files:
                os.chmod(os.path.join(root, f), 0o666 & ~umask)
        final = os.path.join(a.out, run)
        old = None
        if os.path.exists(final):
            old = tempfile.mkdtemp(prefix=f".{run}.old-", dir=a.out)
            os.rename(final, os.path.join(old, run))
        os.rename(tmp, final)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"wrote {n} scalars of run {run} to {final}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
