"""Shared constants, the Skip exception and small text and tensor helpers."""
import os
import re

import torch



IMPORTER_VERSION = 10  # part of the resume key; see still_current() for what older versions keep
PROBLEM_RE = re.compile(r"^(\d+)_([A-Za-z0-9_]+)\.py$")
CATEGORY = {1: "operator", 2: "fusion", 3: "network", 4: "model"}
# --timeout by level when not given: level 3's networks (224 x 224 inputs, recurrent nets of
# hundreds of steps) need longer checking runs than single operators
LEVEL_TIMEOUT = {1: 300, 2: 300, 3: 900}
GIB = 1024 ** 3
BASE_BYTES = 0.6 * GIB          # an interpreter with torch loaded
LEAN_SHARE = 0.9                # of the budget, for one CPU trace of a problem for the GPU only (lean_bytes)
FLOPS_PER_S = 1.5e10            # rough one-core fp32 rates for the size search (the cpu sizes are then measured)
BYTES_PER_S = 3e9
NO_SHRINK = re.compile(r"kernel|stride|pad|dilation|group|axis|factor|scale", re.I)  # values with a role, not an extent


class Skip(Exception):
    """A problem that cannot be converted; the message is the reason."""


def snake(name):
    """KernelBench's file name in snake case, acronyms and dimensions kept whole: ReLU -> relu,
    LeNet5 -> lenet5, ResNet -> resnet, Max_Pooling_2D -> max_pooling_2d (these once gave re_lu,
    le_net5, res_net and max_pooling_2_d)."""
    name = name.replace("ReLU", "Relu")
    name = re.sub(r"([A-Z][a-z]+)Net", lambda m: m.group(1) + "net", name)
    name = re.sub(r"(\d)D(?![a-z])", r"\1d", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    return re.sub(r"_+", "_", s).lower().strip("_")


def task_name(level, path):
    base = snake(os.path.splitext(os.path.basename(path))[0].split('_', 1)[1])
    pid = int(os.path.basename(path).split('_', 1)[0])
    return f"l{level}_{pid:03d}_{base}" if level is not None else f"{pid:03d}_{base}"


def yaml_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def yaml_float(v):
    r = repr(float(v))
    if "e" in r or "E" in r:
        mant, exp = r.lower().split("e")
        if "." not in mant:
            mant += ".0"
        return f"{mant}e{int(exp):+d}"
    return r


DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
          torch.int8: "int8", torch.uint8: "uint8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64",
          torch.bool: "bool"}


def dtype_name(t, what):
    if t.dtype not in DTYPES:
        raise Skip(f"{what} has dtype {t.dtype}, which leap tasks cannot declare")
    return DTYPES[t.dtype]


def nbytes(t):
    return t.numel() * t.element_size()


def gib(b):
    return f"{b / GIB:.2f} GiB"
