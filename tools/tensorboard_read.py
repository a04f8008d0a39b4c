#!/usr/bin/env python3
"""Reads TensorBoard event files back with TensorBoard's own reader (EventAccumulator) and prints
their scalars as JSON: {"<tag>": [[step, value, wall_time], ...], ...} (tests/test_export_tensorboard.cpp).

Usage: tensorboard_read.py RUN_DIR
"""
import json
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError as e:
        print(f"tensorboard_read: {e} (scripts/setup.sh installs tensorboard into .venv)", file=sys.stderr)
        return 4
    acc = event_accumulator.EventAccumulator(sys.argv[1], size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    out = {tag: [[e.step, e.value, e.wall_time] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
