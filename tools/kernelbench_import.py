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
import argparse
import ast
import contextlib
import hashlib
import inspect
import json
import math
import os
import re
import resource
import shutil
import signal
import sys
import time
import traceback
import types
import warnings
import weakref

try:
    import torch
except ImportError as e:  # the C++ command turns exit 4 into a clear message
    sys.stderr.write(f"kernelbench_import: cannot import torch ({e}); run scripts/setup.sh or set LEAP_PYTHON\n")
    sys.exit(4)

IMPORTER_VERSION = 9  # part of the resume key; see still_current() for what older versions keep
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
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    return re.sub(r"_+", "_", s).lower().strip("_")


def find_problems(kb_dir, levels):
    """[(level or None, problem id, path)] sorted by level then id."""
    out = []
    root = os.path.join(kb_dir, "KernelBench")
    level_dirs = []
    if os.path.isdir(root):
        for d in sorted(os.listdir(root)):
            m = re.fullmatch(r"level(\d+)", d)
            if m:
                level_dirs.append((int(m.group(1)), os.path.join(root, d)))
    if not level_dirs:
        m = re.fullmatch(r"level(\d+)", os.path.basename(os.path.normpath(kb_dir)))
        level_dirs = [(int(m.group(1)) if m else None, kb_dir)]
    for level, d in level_dirs:
        if level is not None and levels and level not in levels:
            continue
        for f in sorted(os.listdir(d)):
            m = PROBLEM_RE.match(f)
            if m:
                out.append((level, int(m.group(1)), os.path.join(d, f)))
    out.sort(key=lambda t: (t[0] or 0, t[1]))
    return out


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


# ---- the problem module, at any values of its size symbols ------------------------------------

def const_value(node):
    """Value of an expression of int literals and arithmetic (`256 * 8`), else None."""
    try:
        if any(isinstance(n, (ast.Name, ast.Call, ast.Attribute, ast.Subscript)) for n in ast.walk(node)):
            return None
        v = eval(compile(ast.Expression(node), "<size>", "eval"), {"__builtins__": {}})
        return v if type(v) is int else None
    except Exception:
        return None


def _unpacked_targets(node):
    """[(symbol, value)] of a tuple-unpacking assignment of int literals, `D, H, W = 16, 32, 32`
    (each name its own symbol), else []."""
    if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Tuple):
        return []
    names, value = node.targets[0].elts, node.value
    if not isinstance(value, ast.Tuple) or len(value.elts) != len(names) or \
            not all(isinstance(t, ast.Name) for t in names):
        return []
    vals = [const_value(e) for e in value.elts]
    if any(v is None for v in vals):
        return []
    return [(t.id, v) for t, v in zip(names, vals) if v > 1]


def _size_targets(node):
    """[(symbol, value)] a module-level assignment defines: `a = b = 128` gives a and b; a tuple of
    int literals `shape = (32768, 64)` gives shape_0 and shape_1; `a, b = 16, 32` gives a and b."""
    unpacked = _unpacked_targets(node)
    if unpacked:
        return unpacked
    if not isinstance(node, ast.Assign) or not all(isinstance(t, ast.Name) for t in node.targets):
        return []
    v = const_value(node.value)
    if v is not None:
        return [(t.id, v) for t in node.targets] if v > 1 else []
    if isinstance(node.value, ast.Tuple) and len(node.targets) == 1:
        vals = [const_value(e) for e in node.value.elts]
        if vals and all(x is not None for x in vals):
            return [(f"{node.targets[0].id}_{i}", x) for i, x in enumerate(vals) if x > 1]
    return []


def base_symbols(src):
    """Module-level int assignments of literals ({name: value}, value > 1; see _size_targets)."""
    out = {}
    for node in ast.parse(src).body:
        for k, v in _size_targets(node):
            out[k] = v
    return out


def source_literals(src):
    """Small int literals of the source (>= 2), other than those of the size assignments: divisors
    the problem may rely on."""
    out = set()
    tree = ast.parse(src)
    sizes = {id(n) for node in tree.body if isinstance(node, ast.Assign) and
             (const_value(node.value) is not None or _unpacked_targets(node)) for n in ast.walk(node.value)}
    for n in ast.walk(tree):
        if id(n) in sizes:
            continue
        if isinstance(n, ast.Constant) and type(n.value) is int and 2 <= n.value <= 4096:
            out.add(n.value)
    return out


def load_module(path, src, overrides=None):
    """Executes the problem source, with the module-level assignments named in `overrides` given
    those values (assignments derived from them are computed again)."""
    tree = ast.parse(src)
    if overrides:
        for node in tree.body:
            if not _size_targets(node):
                continue
            if isinstance(node.targets[0], ast.Tuple):  # a, b = 16, 32
                for i, t in enumerate(node.targets[0].elts):
                    if t.id in overrides:
                        node.value.elts[i] = ast.copy_location(ast.Constant(overrides[t.id]), node.value.elts[i])
            elif isinstance(node.value, ast.Tuple):
                name = node.targets[0].id
                for i, e in enumerate(node.value.elts):
                    if f"{name}_{i}" in overrides:
                        node.value.elts[i] = ast.copy_location(ast.Constant(overrides[f"{name}_{i}"]), e)
            else:
                for t in node.targets:
                    if t.id in overrides:
                        node.value = ast.copy_location(ast.Constant(overrides[t.id]), node.value)
    mod = types.ModuleType("kb_problem")
    mod.__file__ = path
    try:
        exec(compile(tree, path, "exec"), mod.__dict__)
    except Exception as e:
        raise Skip(f"the file does not run: {type(e).__name__}: {e}")
    for n in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, n):
            raise Skip(f"the file defines no {n}")
    return mod


def module_ints(mod):
    """The module's int globals (> 1), and the int elements of its tuple globals as <name>_<i>."""
    out = {}
    for k, v in vars(mod).items():
        if k.startswith("_") or not re.fullmatch(r"[A-Za-z_]\w*", k):
            continue
        if type(v) is int and v > 1:
            out[k] = v
        elif isinstance(v, tuple) and v and all(type(x) is int for x in v):
            for i, x in enumerate(v):
                if x > 1 and f"{k}_{i}" not in vars(mod):
                    out[f"{k}_{i}"] = x
    return out


class Recorder:
    """Wraps torch.rand/randn/randint while get_inputs() runs, to learn each input's distribution."""

    def __init__(self):
        self.seen = {}

    def __enter__(self):
        self.saved = {n: getattr(torch, n) for n in ("rand", "randn", "randint")}

        def wrap(name, f):
            def g(*a, **k):
                t = f(*a, **k)
                self.seen[id(t)] = (name, a, k, t)
                return t
            return g

        for n, f in self.saved.items():
            setattr(torch, n, wrap(n, f))
        return self

    def __exit__(self, *exc):
        for n, f in self.saved.items():
            setattr(torch, n, f)

    def randint_bounds(self, t):
        """(low, high) of the torch.randint call that made input tensor t, else None."""
        rec = self.seen.get(id(t))
        if rec is None or rec[3] is not t or rec[0] != "randint":
            return None
        a, k = rec[1], rec[2]
        ints = [x for x in a if type(x) is int]
        low, high = (0, ints[0]) if len(ints) == 1 else (ints[0], ints[1]) if len(ints) >= 2 else (None, None)
        low, high = k.get("low", low), k.get("high", high)
        return (low, high) if type(low) is int and type(high) is int else None

    def init_of(self, t, bound_text=str):
        """init mapping text for input tensor t; `bound_text(j, value)` writes a randint bound
        (j 0: low, 1: high), a number or a size symbol."""
        rec = self.seen.get(id(t))
        if rec is not None and rec[3] is t:
            name = rec[0]
            if name == "rand":
                return "{uniform: {low: 0, high: 1}}"
            if name == "randn":
                return "{normal: {mean: 0, std: 1}}"
            b = self.randint_bounds(t)
            if b is not None:
                return f"{{randint: {{low: {bound_text(0, b[0])}, high: {bound_text(1, b[1])}}}}}"
        if t.dtype == torch.bool:
            return None
        if not t.is_floating_point():  # integer tensor of unknown origin: the observed range
            return f"{{randint: {{low: {int(t.min())}, high: {int(t.max()) + 1}}}}}"
        f = t.double()
        lo, hi = float(f.min()), float(f.max())
        if lo >= 0:
            return f"{{uniform: {{low: {yaml_float(round(lo, 6))}, high: {yaml_float(round(max(hi, lo + 1e-6), 6))}}}}}"
        return f"{{normal: {{mean: {yaml_float(round(float(f.mean()), 6))}, std: {yaml_float(round(float(f.std()), 6))}}}}}"


def prepare_model(model):
    """Refuses dropout; gives training-mode batch norm a batch-statistics forward (running stats,
    which its training-mode output never reads, dropped). Returns the number of such batch norms."""
    bn = 0
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 and m.training:
            raise Skip("dropout in training mode makes the reference non-deterministic")
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training and m.track_running_stats:
            m.track_running_stats = False
            m.running_mean = None
            m.running_var = None
            m.num_batches_tracked = None
            bn += 1
    return bn


class Problem:
    """The problem's module, model and inputs at one set of symbol values, on `device` ("cpu" or
    "meta"); weights follow torch.manual_seed(seed) (or `weight_rules` when given)."""

    def __init__(self, path, src, overrides, seed, device="cpu", record=False, inputs=True):
        self.mod = load_module(path, src, overrides)
        self.ints = module_ints(self.mod)
        self.device = device
        torch.manual_seed(seed)
        with torch.device(device):
            init = list(self.mod.get_init_inputs())
            self.model = self.mod.Model(*init)
        self.batch_norms = prepare_model(self.model)
        state = dict(self.model.named_parameters())
        state.update(dict(self.model.named_buffers()))
        self.state = {k: v.detach() for k, v in state.items()}
        if not inputs:
            return
        torch.manual_seed(seed)
        self.rec = Recorder() if record else None
        with torch.device(device):
            if self.rec:
                with self.rec:
                    self.raw_inputs = list(self.mod.get_inputs())
            else:
                self.raw_inputs = list(self.mod.get_inputs())
        sig = inspect.signature(self.model.forward)
        params = list(sig.parameters.values())
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            self.names = [f"in{i}" for i in range(len(self.raw_inputs))]
        else:
            self.names = [p.name for p in params][:len(self.raw_inputs)]
            if len(self.names) != len(self.raw_inputs):
                raise Skip(f"get_inputs() returns {len(self.raw_inputs)} values but forward takes {len(self.names)}")
        self.tensor_idx, self.constants = [], []
        for i, (n, v) in enumerate(zip(self.names, self.raw_inputs)):
            if isinstance(v, torch.Tensor):
                if v.device.type != device:
                    raise Skip(f"input '{n}' is made on {v.device}, not on the cpu")
                self.tensor_idx.append(i)
            elif isinstance(v, (bool, int)):
                self.constants.append((n, int(v), "int64"))
            elif isinstance(v, float):
                self.constants.append((n, v, "float32"))
            else:
                raise Skip(f"input '{n}' is a {type(v).__name__}, neither a tensor nor a number")
        self.tensors = [self.raw_inputs[i] for i in self.tensor_idx]

    def adopt(self, weights):
        """Makes these values (name -> tensor) the Model's parameters/buffers for good, freeing its own."""
        for k, v in weights.items():
            path, _, attr = k.rpartition(".")
            sub = self.model.get_submodule(path) if path else self.model
            table = sub._parameters if attr in sub._parameters else sub._buffers
            table[attr] = v
            self.state[k] = v

    def call(self, tensors, weights):
        """forward with these tensor inputs and parameters/buffers (name -> tensor)."""
        args = list(self.raw_inputs)
        for i, t in zip(self.tensor_idx, tensors):
            args[i] = t
        saved = []
        try:
            for k, v in weights.items():
                path, _, attr = k.rpartition(".")
                sub = self.model.get_submodule(path) if path else self.model
                table = sub._parameters if attr in sub._parameters else sub._buffers
                saved.append((table, attr, table[attr]))
                table[attr] = v
            return self.model(*args)
        finally:
            for table, attr, old in reversed(saved):
                table[attr] = old


def flat_outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return list(out)
    raise Skip(f"forward returns {type(out).__name__}, not a tensor or a tuple of tensors")


# ---- analysis on the meta device: shapes, bytes, FLOPs, peak memory ------------------------------

class _Live(torch.utils._python_dispatch.TorchDispatchMode):
    """Tracks the bytes of live tensors the ops create (views and in-place results not counted)."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self.traffic = 0

    def _drop(self, n):
        self.live -= n

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = {id(a) for a in args if isinstance(a, torch.Tensor)}
        for a in args:
            if isinstance(a, torch.Tensor):
                self.traffic += nbytes(a)
        for o in (out if isinstance(out, (tuple, list)) else [out]):
            if isinstance(o, torch.Tensor):
                self.traffic += nbytes(o)
                if id(o) in ins or o._is_view():
                    continue
                n = nbytes(o)
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(o, self._drop, n)
        return out


def analyze(path, src, overrides, seed):
    """The problem at these symbol values on the meta device: {ints, inputs, weights, outputs
    (name -> (shape, dtype)), in_bytes, w_bytes, out_bytes, peak, flops, traffic}. Raises when
    the problem cannot run on meta (data-dependent ops); shape errors at bad values raise too."""
    from torch.utils.flop_counter import FlopCounterMode
    p = Problem(path, src, overrides, seed, device="meta")
    a = {"ints": p.ints, "inputs": [tuple(t.shape) for t in p.tensors],
         "weights": {k: tuple(v.shape) for k, v in p.state.items()},
         "in_bytes": sum(nbytes(t) for t in p.tensors), "w_bytes": sum(nbytes(v) for v in p.state.values())}
    live = _Live()
    fc = FlopCounterMode(display=False)
    with torch.no_grad(), fc, live:
        outs = flat_outputs(p.call(list(p.tensors), dict(p.state)))
    a["outputs"] = [tuple(o.shape) for o in outs]
    a["out_bytes"] = sum(nbytes(o) for o in outs)
    a["peak"] = live.peak
    a["flops"] = fc.get_total_flops()
    a["traffic"] = live.traffic
    return a


def est_seconds(a):
    return a["flops"] / FLOPS_PER_S + a["traffic"] / BYTES_PER_S


def need_bytes(a):
    """Resident memory the conversion needs at these sizes: inputs, their clones and fresh inputs,
    two copies of the weights, outputs of several runs and the forward's own peak."""
    return BASE_BYTES + 3 * a["in_bytes"] + 2 * a["w_bytes"] + 3 * a["out_bytes"] + 1.5 * a["peak"]


def lean_bytes(a):
    """Resident memory of a problem imported for the GPU only and traced once on the CPU: one copy
    of the inputs and of the weights (the Model's own replaced by the seeded ones), the forward's
    output and the trace's, and the forward's own peak."""
    return BASE_BYTES + a["in_bytes"] + a["w_bytes"] + 2 * a["out_bytes"] + 1.5 * a["peak"]


def dims_of(a):
    return list(a["inputs"]) + list(a["weights"].values()) + list(a["outputs"])


def roles_kept(full, cand):
    """No dimension becomes 1 (or vanishes) where the full-size problem has more; ranks equal."""
    fd, cd = dims_of(full), dims_of(cand)
    if len(fd) != len(cd):
        return False
    for f, c in zip(fd, cd):
        if len(f) != len(c):
            return False
        if any(x >= 2 and y < 2 for x, y in zip(f, c)):
            return False
    return True


def halve(v):
    """The next smaller value: v / 2 for even v, the odd number nearest v / 2 for odd v."""
    if v % 2 == 0:
        return v // 2
    h = v // 2
    return h if h % 2 == 1 else h + 1


def shrink_search(path, src, base, full_a, seed, fits, frozen=(), literals=(), best_effort=False):
    """Smaller values of the base size symbols until `fits(analysis)`: the largest shrinkable
    symbol is halved first; a symbol whose halving breaks the problem (an error, a dimension
    becoming 1, a divisibility the full sizes have between symbols or with a literal of the source)
    is frozen. Returns (overrides, analysis) or None when nothing fits (with `best_effort`, the
    smallest values reached instead)."""
    cur = dict(base)
    frozen = set(frozen) | {k for k, v in base.items() if v < 8 or NO_SHRINK.search(k)}
    # symbols of equal value move together (one of them names the dims)
    link = {k: [j for j in base if base[j] == base[k]] for k in base}
    for k in list(frozen):
        frozen.update(link.get(k, []))
    pairs = [(a, b) for a in base for b in base if base[a] != base[b] and base[a] % base[b] == 0]
    lits = {k: [L for L in literals if base[k] % L == 0] for k in base}
    a = full_a
    for _ in range(200):
        if a is not None and fits(a):
            return cur, a
        movable = sorted((k for k in cur if k not in frozen), key=lambda k: -cur[k])
        if not movable:
            return (cur, a) if best_effort and a is not None else None
        k = movable[0]
        v = halve(cur[k])
        if v < 4 or v == cur[k]:
            frozen.add(k)
            continue
        cand = dict(cur)
        for j in link[k]:
            cand[j] = v
        if any(cand[x] % cand[y] for x, y in pairs) or any(v % L for L in lits[k]):
            frozen.update(link[k])
            continue
        try:
            ca = analyze(path, src, cand, seed)
        except Exception:
            frozen.update(link[k])
            continue
        if full_a is not None and not roles_kept(full_a, ca):
            frozen.update(link[k])
            continue
        cur, a = cand, ca
    return None


# ---- dims derived from the size symbols (pooling and convolution outputs, upsampling) ------------

def eval_dim(expr, ints):
    """Value of a shape expression (leap's integer `/` floors) at these symbol values."""
    if expr.isdigit():
        return int(expr)
    return int(eval(expr.replace("/", "//"), {"__builtins__": {}}, dict(ints)))


def dim_expr(s, m, c, form):
    if form == "pool" and m == 1:
        form, c = "mul", c + 1
    cs = "" if c == 0 else (f" + {c}" if c > 0 else f" - {-c}")
    if form == "pool":  # floor((s + c) / m) + 1: pooling and convolution outputs
        return f"({s}{cs}) / {m} + 1" if c else f"{s} / {m} + 1"
    return f"{s} * {m}{cs}" if m > 1 else (f"{s}{cs}" if c else s)  # s * m + c: transposed convs, upsampling


def fit_derived_dims(path, src, base, full_a, seed, exprs, F_shapes, keys, symbol_of, literals, extra=None):
    """A literal dim of `exprs` that changes with the size symbols gets an expression over one
    symbol, `(s + c) / m + 1` or `s * m + c` (|c| <= 64, m <= 32), fitted on the meta analyses at
    KernelBench's sizes and at scaled-down sets (shrinkable symbols quartered, halved, halved plus
    1, 3, 5, 7; the traced sizes), simplest first. Fits are checked again at the sizes actually used (eval_shapes)."""
    if not any((d.isdigit() and int(d) >= 2) or re.fullmatch(r"[A-Za-z_]\w*", d) for e in exprs for d in e):
        return
    points = []
    shrinkable = [k for k, v in base.items() if v >= 8 and not NO_SHRINK.search(k)]
    # halved, quartered, and halved plus small odd offsets (other residues, so a floor division's
    # offset is pinned down), plus the sizes the problem is traced at
    overs = [{k: (v // 4 if k in shrinkable and v // 4 >= 4 else v) for k, v in base.items()}]
    for off in (0, 1, 3, 5, 7):
        overs.append({k: (v // 2 + off if k in shrinkable else v) for k, v in base.items()})
    if extra is not None:
        overs.append(extra)
    for over in overs:
        if over == base:
            continue
        try:
            points.append(analyze(path, src, over, seed))
        except Exception:
            continue
    if not points:
        return
    def shapes_of(a):
        return list(a["inputs"]) + [a["weights"][k] for k in keys if k in a["weights"]] + list(a["outputs"])
    all_shapes = [shapes_of(a) for a in points]
    if any(len(sh) != len(F_shapes) or any(len(x) != len(y) for x, y in zip(sh, F_shapes)) for sh in all_shapes):
        return
    # A dim named by a symbol only because its value equals the symbol's (a pooling output of 32
    # where channels = 32) becomes a literal to fit when the symbol does not follow it at other sizes.
    for i, e in enumerate(exprs):
        for j, d in enumerate(e):
            if re.fullmatch(r"[A-Za-z_]\w*", d) and any(a["ints"].get(d) != sh[i][j] for a, sh in zip(points, all_shapes)):
                e[j] = str(F_shapes[i][j])
    syms = [n for v, n in symbol_of.items()]
    ints = [full_a["ints"]] + [a["ints"] for a in points]
    half = {k: (v // 2 if k in shrinkable else v) for k, v in base.items()}
    cache = {}

    def probe(sname, r):
        """Analysis with the shrinkable symbols halved and `sname` at half + r (other residues)."""
        over = dict(half)
        for k in base:  # symbols of equal value move together
            if base[k] == base[sname]:
                over[k] = base[sname] // 2 + r
        key = tuple(sorted(over.items()))
        if key not in cache:
            try:
                a = analyze(path, src, over, seed)
                cache[key] = (a["ints"], shapes_of(a))
            except Exception:
                cache[key] = None
        return cache[key]

    def holds(form, m, c, x, v):
        return (x + c >= 0 and (x + c) // m + 1 == v) if form == "pool" else x * m + c == v

    for i, e in enumerate(exprs):
        for j, d in enumerate(e):
            if not d.isdigit():
                continue
            vals = [int(d)] + [sh[i][j] for sh in all_shapes]
            if len(set(vals)) == 1:
                continue
            cands = []
            for sname in syms:
                xs = [p.get(sname) for p in ints]
                if None in xs or len(set(xs)) == 1:
                    continue
                for m in range(1, 33):
                    for c in range(-64, 65):
                        for form in ("pool", "mul"):
                            if (form == "mul" or m > 1) and all(holds(form, m, c, x, v) for x, v in zip(xs, vals)):
                                cands.append((abs(c) + 4 * (m - 1), form, sname, m, c))
            # several offsets fit these points (a floor division): more residues of the symbol decide
            for sname in {cd[2] for cd in cands} if len(cands) > 1 else ():
                if sname not in base:
                    continue
                for r in range(1, 33):
                    if len(cands) <= 1:
                        break
                    got = probe(sname, r)
                    if got is None or len(got[1]) != len(F_shapes) or len(got[1][i]) != len(e):
                        continue
                    pi, v = got[0], got[1][i][j]
                    cands = [cd for cd in cands if cd[2] not in pi or holds(cd[1], cd[3], cd[4], pi[cd[2]], v)]
            if cands:
                cost, form, sname, m, c = min(cands)
                e[j] = dim_expr(sname, m, c, form)


# ---- fixed values: generated from a seed where a distribution reproduces them -------------------

def ks_distance(x, cdf):
    xs, _ = torch.sort(x.double().flatten())
    n = xs.numel()
    f = cdf(xs)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return float(torch.maximum((i / n - f).abs(), (f - (i - 1) / n).abs()).max())


def weight_rule(w):
    """How a fixed value is stored: ("normal", mean, 0) for a constant, ("uniform", lo, hi) or
    ("normal", mean, std) when the values pass a Kolmogorov-Smirnov fit, else ("file",)."""
    if not w.is_floating_point() or w.dtype not in (torch.float32, torch.float64) or w.numel() == 0:
        return ("file",)
    flat = w.detach().flatten()
    lo, hi = float(flat.min()), float(flat.max())
    if lo == hi:
        return ("normal", lo, 0.0)
    head = flat[:1 << 16]
    if bool((head == head.round()).all()) and bool((flat == flat.round()).all()):
        return ("file",)  # integer-valued (masks, arange, identities): structure, kept
    if flat.numel() < 16:
        return ("file",)
    if flat.numel() > 1 << 20:  # a sample (a 4 GB parameter would otherwise be copied to fp64 whole)
        flat = flat[torch.randint(flat.numel(), (1 << 20,), generator=torch.Generator().manual_seed(0))]
    x = flat.double()
    n = x.numel()
    crit = 0.01 + 1.63 / math.sqrt(n)
    width = hi - lo
    pad = width / max(n, 1)
    lo_u, hi_u = lo - pad, hi + pad
    d_u = ks_distance(x, lambda s: ((s - lo_u) / (hi_u - lo_u)).clamp(0, 1))
    if d_u < crit:
        # kaiming-style bounds are symmetric: use +-max when the range is
        m = max(abs(lo), abs(hi))
        if lo < 0 < hi and abs(abs(lo) - abs(hi)) < 0.02 * m:
            return ("uniform", -m, m)
        return ("uniform", lo_u, hi_u)
    mean, std = float(x.mean()), float(x.std())
    if std > 0:
        d_n = ks_distance(x, lambda s: 0.5 * (1 + torch.erf((s - mean) / (std * math.sqrt(2)))))
        if d_n < crit:
            return ("normal", mean, std)
    return ("file",)


def generate(rule, shape, seed, dtype):
    """The values LibTorch's make_inputs gives `init: {<rule>, seed: seed}` (same kernel, same order)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.empty(shape, dtype=torch.float32)
    if rule[0] == "uniform":
        t.uniform_(rule[1], rule[2], generator=g)
    else:
        t.normal_(rule[1], rule[2], generator=g)
    return t.to(dtype).contiguous()


# ---- devices written into a trace ----------------------------------------------------------------

def unbake_devices(traced):
    """Replaces every device constant of a trace's graphs (torch.jit.trace records the device of a
    tensor created in forward, `torch.zeros(n, device=x.device)` or `torch.arange(n)`, as the
    constant 'cpu') with the device of the graph's first tensor input (`prim::device(x)`), so the
    reference follows its inputs to the GPU. Returns the number of constants replaced."""
    n = 0
    for sub in [traced] + [m for _, m in traced.named_modules()][1:]:
        try:
            g = sub.forward.graph
        except (AttributeError, RuntimeError):
            continue
        first = next((v for v in list(g.inputs())[1:] if v.type().kind() == "TensorType"), None)
        if first is None:
            continue
        for c in g.findAllNodes("prim::Constant", True):
            if c.output().type().kind() != "DeviceObjType":
                continue
            d = g.create("prim::device", [first])
            d.output().setType(torch._C.DeviceObjType.get())
            d.insertBefore(c)
            c.output().replaceAllUsesWith(d.output())
            c.destroy()
            n += 1
    return n


def saved_device_constants(ref_file):
    """Whether a saved TorchScript module's code writes a device as a constant (`torch.device(...)`,
    what a trace of a tensor created in forward leaves without unbake_devices)."""
    import zipfile
    try:
        with zipfile.ZipFile(ref_file) as z:
            return any(b"torch.device(" in z.read(n) for n in z.namelist() if n.endswith(".py"))
    except (OSError, zipfile.BadZipFile, KeyError):
        return True  # unreadable: redo it


# ---- one problem ---------------------------------------------------------------------------------

def same(a, b):
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def close(a, b):
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and
        (torch.allclose(x, y, atol=1e-5, rtol=1e-5, equal_nan=True) if x.is_floating_point() else torch.equal(x, y))
        for x, y in zip(a, b))


def fresh_like(t, g, scale=1.0):
    if t.dtype == torch.bool:
        return torch.rand(t.shape, generator=g) < 0.5
    if not t.is_floating_point():
        lo, hi = int(t.min()), int(t.max()) + 1
        return torch.randint(lo, max(hi, lo + 1), t.shape, generator=g, dtype=t.dtype)
    return (torch.randn(t.shape, generator=g, dtype=torch.float32) * scale).to(t.dtype)


class _Rescale(Exception):
    """The first run at the checking sizes was much slower than estimated: start again with the
    estimates multiplied by `factor`."""

    def __init__(self, factor):
        super().__init__(factor)
        self.factor = factor


class _GpuOnly(Exception):
    """The CPU checks cannot run the problem at sizes that can be trusted at KernelBench's (too
    large or too slow there, and no scaled sizes hold): import it at KernelBench's sizes only, for
    the GPU, with `reason` (the task gets `sizes_cpu: none`)."""

    def __init__(self, reason, meta=None):
        super().__init__(reason)
        self.reason = reason
        self.meta = meta


def convert(level, pid, path, out_dir, o):
    """Writes one task folder; returns (task, info). Raises Skip with the reason."""
    factor = 1.0
    try:
        try:
            return convert_at(level, pid, path, out_dir, o, factor)
        except _Rescale as r:
            factor = r.factor
            task, info = convert_at(level, pid, path, out_dir, o, factor)
            info["slow_factor"] = round(factor, 1)
            return task, info
    except _GpuOnly as g:
        try:
            return convert_at(level, pid, path, out_dir, o, factor, gpu_only=g.reason, meta=g.meta)
        except _GpuOnly as g2:  # the CPU run at KernelBench's sizes was slower than estimated
            return convert_at(level, pid, path, out_dir, o, factor, gpu_only=g2.reason, meta=g2.meta)


RANDOM_OPS = re.compile(r"^aten\.(rand|randn|randint|randperm|bernoulli|multinomial|normal|uniform|exponential|"
                        r"geometric|cauchy|log_normal|poisson|native_dropout|random)(_like)?_?\b")


class _Ops(torch.utils._python_dispatch.TorchDispatchMode):
    """The names of the ATen ops a forward runs (on the meta device: no values needed)."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        self.names.add(str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func))
        return func(*args, **(kwargs or {}))


def lean_checks(T, state):
    """The run checks of a problem imported for the GPU only, from one forward (on the meta device
    or the CPU): it draws no random numbers, writes none of its inputs or parameters/buffers
    (version counters), and returns tensors. Returns the outputs; raises Skip."""
    versions = [t._version for t in T.tensors] + [v._version for v in state.values()]
    ops = _Ops()
    with torch.no_grad(), ops:
        out = flat_outputs(T.call(list(T.tensors), dict(state)))
    rnd = sorted(n for n in ops.names if RANDOM_OPS.match("aten." + n.split("aten.")[-1]))
    if rnd:
        raise Skip(f"forward is not deterministic: it draws random numbers ({', '.join(rnd[:3])})")
    for i, t in enumerate(T.tensors):
        if t._version != versions[i]:
            raise Skip(f"forward modifies its input '{T.names[T.tensor_idx[i]]}' in place")
    if any(v._version != versions[len(T.tensors) + j] for j, v in enumerate(state.values())):
        raise Skip("forward updates its own buffers")
    return out


def meta_tensor_constants(traced):
    """Names of tensors the trace holds as constants on the meta device (attributes of the Model
    that are neither parameters nor buffers, captured by value): such a trace has no values."""
    found = []
    for sub in [traced] + [m for _, m in traced.named_modules()][1:]:
        try:
            g = sub.forward.graph
        except (AttributeError, RuntimeError):
            continue
        for c in g.findAllNodes("prim::Constant", True):
            if c.output().type().kind() == "TensorType" and c.hasAttribute("value") and c.kindOf("value") == "t" \
                    and c.t("value").device.type == "meta":
                found.append(str(c.output().debugName()))
    return found


class meta_tracing:
    """Lets torch.jit.trace run on meta tensors: the Python meta kernels' shape helpers (convolution's
    output shape, ...) read sizes that the tracer turns into tensors ("cond must be a bool"); they
    run with the tracing state suspended (they compute shapes only: nothing of theirs belongs in
    the trace)."""

    def __enter__(self):
        import torch._meta_registrations as mr
        self.mr, self.saved = mr, {}
        for name, f in list(vars(mr).items()):
            if callable(f) and not isinstance(f, type) and "shape" in name and getattr(f, "__module__", "") == mr.__name__:
                self.saved[name] = f
                setattr(mr, name, self._untraced(f))
        return self

    @staticmethod
    def _untraced(f):
        def g(*a, **k):
            state = torch._C._get_tracing_state()
            torch._C._set_tracing_state(None)
            try:
                return f(*a, **k)
            finally:
                torch._C._set_tracing_state(state)
        return g

    def __exit__(self, *exc):
        for name, f in self.saved.items():
            setattr(self.mr, name, f)


def rules_by_module(P, seed):
    """Fit rules of the parameters of a Model too large to build on the CPU whole: each module's
    own parameters are made on the CPU (to_empty), initialised by its reset_parameters() under
    `seed`, fitted and freed, one module at a time. Returns {name: rule}; raises Skip when a
    parameter or buffer has no reset_parameters() to make it."""
    rules = {}
    torch.manual_seed(seed)
    for mname, m in P.model.named_modules():
        own = list(m.named_parameters(recurse=False)) + list(m.named_buffers(recurse=False))
        if not own:
            continue
        reset = getattr(m, "reset_parameters", None) or getattr(m, "_reset_parameters", None)
        if reset is None:
            raise Skip(f"its parameters ({gib(sum(nbytes(v) for v in P.state.values()))}) are over the budget to "
                       f"build on the CPU, and '{mname or 'Model'}' ({type(m).__name__}) has no reset_parameters() "
                       f"to make them one module at a time")
        m.to_empty(device="cpu", recurse=False)
        with torch.no_grad():
            reset()
        for n, v in own:
            k = f"{mname}.{n}" if mname else n
            rules[k] = weight_rule(getattr(m, n))
        m.to_empty(device="meta", recurse=False)
    return rules


def convert_at(level, pid, path, out_dir, o, factor, gpu_only=None, meta=None):
    """convert() with the time estimates multiplied by `factor`. With `gpu_only` (the reason), the
    problem is imported at KernelBench's sizes only, for the GPU (no cpu sizes): traced on the CPU
    when its runs fit the budget and the timeout there, else (`meta`) on the meta device with its
    shapes checked."""
    if level == 4:
        raise Skip("level 4 problems need Hugging Face model downloads (out of scope)")
    src = open(path, encoding="utf-8").read()
    seed = o.seed
    budget = o.memory_gb * GIB
    base = base_symbols(src)
    literals = source_literals(src)
    info = {}
    # 1. KernelBench's sizes, on the meta device.
    try:
        full_a = analyze(path, src, None, seed)
    except Skip:
        raise
    except Exception as e:
        full_a = None
        info["meta"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    # 2. The sizes it is traced and checked at: KernelBench's when they fit the budget and timeout.
    runs = 8  # forward calls of the checks below at those sizes

    def fits_budget(a):
        return need_bytes(a) <= 0.6 * budget and (o.timeout <= 0 or runs * factor * est_seconds(a) <= 0.15 * o.timeout)

    def fits_scaled(a):  # once scaled, small enough to be quick
        return need_bytes(a) <= min(0.6 * budget, BASE_BYTES + 0.25 * GIB) and \
            (o.timeout <= 0 or runs * factor * est_seconds(a) <= 0.01 * o.timeout)

    trace_over = None
    if gpu_only is not None:
        if full_a is None:
            raise Skip(f"{gpu_only}; and it cannot be analysed on the meta device to import it for the GPU "
                       f"({info['meta']})")
        # traced once on the CPU at KernelBench's sizes when memory allows and three forwards (run,
        # trace, trace check) fit half the timeout; else on the meta device, shapes checked
        if meta is None:
            meta = lean_bytes(full_a) > LEAN_SHARE * budget or \
                (o.timeout > 0 and 3 * factor * est_seconds(full_a) > 0.5 * o.timeout)
        info["gpu_only"] = gpu_only
    elif full_a is not None:
        if not fits_budget(full_a):
            vals = {d for sh in dims_of(full_a) for d in sh}
            derived = any(v in vals for k, v in full_a["ints"].items() if k not in base)
            fz = {k for k, v in base.items() if v not in vals and not derived}
            found = shrink_search(path, src, base, full_a, seed, fits_scaled, literals=literals, frozen=fz) or \
                shrink_search(path, src, base, full_a, seed, fits_budget, literals=literals, frozen=fz)
            if found is None:
                raise _GpuOnly(f"needs about {gib(need_bytes(full_a))} and {runs * factor * est_seconds(full_a):.0f} s "
                               f"(estimated) for the CPU checks at KernelBench's sizes, over 60% of the "
                               f"{o.memory_gb:g} GiB budget or 15% of the {o.timeout:g} s timeout, and no smaller "
                               f"values of its size symbols fit")
            trace_over = found[0]
    else:  # no meta run: judge by the inputs and weights alone (those run on meta in nearly all problems)
        try:
            pm = Problem(path, src, None, seed, device="meta")
            rough = BASE_BYTES + 5 * sum(nbytes(t) for t in pm.tensors) + 3 * sum(nbytes(v) for v in pm.state.values())
        except Skip:
            raise
        except Exception:
            rough = 0
        if rough > 0.6 * budget:
            raise Skip(f"needs about {gib(rough)} at KernelBench's sizes (over the {o.memory_gb:g} GiB budget) and "
                       f"cannot be analysed on the meta device to scale it ({info['meta']})")
    T = Problem(path, src, trace_over, seed, device="meta" if meta else "cpu", record=True)
    info["traced_at"] = "kernelbench" if trace_over is None else "scaled"
    if meta:
        info["traced_at"] = "kernelbench (meta device)"
    if T.batch_norms:
        info["batch_norm"] = T.batch_norms

    # 3. Fixed values: a seeded distribution where one fits, else a file (then at full size only).
    # (judged on KernelBench's values when only the inputs were too large: small scaled weights
    # would not pass the fit)
    W = T
    if (trace_over is not None or meta) and full_a is not None and full_a["w_bytes"] <= 0.2 * budget:
        try:
            W = Problem(path, src, None, seed, inputs=False)
        except Exception:
            W = T
    rules, wseed = {}, {}
    if W.device == "meta":  # too large to build whole on the CPU
        rules = rules_by_module(Problem(path, src, None, seed, device="meta", inputs=False), seed)
    for j, (k, v) in enumerate(T.state.items()):
        if W.device != "meta":
            rules[k] = weight_rule(W.state.get(k, v))
        wseed[k] = (seed * 1000003 + pid * 1009 + j * 7919 + 1) % (1 << 31)
    file_values = {k: W.state[k] for k in T.state if rules.get(k, ("file",))[0] == "file" and W.device != "meta"}

    def weights_for(P):
        ws = {}
        for k, v in P.state.items():
            r = rules.get(k, ("file",))
            if P.device == "meta":
                ws[k] = v  # shapes only
            else:
                ws[k] = v.clone() if r[0] == "file" else generate(r, v.shape, wseed[k], v.dtype)
        return ws

    state = weights_for(T)
    tensors = T.tensors
    if gpu_only is not None and not meta:  # one copy of the weights: the seeded ones replace the Model's
        T.adopt(state)
    if gpu_only is not None:  # one run, its checks read from the run (random ops, version counters)
        out1 = lean_checks(T, state)
    else:
        with torch.no_grad():
            torch.manual_seed(seed + 1)
            t0 = time.perf_counter()
            out1 = flat_outputs(T.call([t.clone() for t in tensors], dict(state)))
            dt1 = time.perf_counter() - t0
            if o.timeout > 0 and factor == 1.0 and runs * dt1 > 0.3 * o.timeout:
                a_T = full_a if trace_over is None else analyze(path, src, trace_over, seed) if full_a is not None else None
                if a_T is not None and est_seconds(a_T) > 0:
                    raise _Rescale(max(2.0, dt1 / est_seconds(a_T)))
            torch.manual_seed(seed + 2)
            out2 = flat_outputs(T.call([t.clone() for t in tensors], {k: v.clone() for k, v in state.items()}))
            if not same(out1, out2):
                raise Skip("forward is not deterministic: two runs on the same inputs differ (dropout or another random op, "
                           "or state the Model keeps between calls, such as a hidden state it updates)")
            probe = {k: v.clone() for k, v in state.items()}
            kept = [t.clone() for t in tensors]
            T.call(kept, probe)
            if any(not torch.equal(probe[k], state[k]) for k in probe):
                raise Skip("forward updates its own buffers")
            for i, t in enumerate(tensors):
                if not torch.equal(kept[i], t):
                    raise Skip(f"forward modifies its input '{T.names[T.tensor_idx[i]]}' in place")
            del probe, kept, out2

    wnames = weight_names(T.names, state)  # parameter / buffer names as identifiers
    keys = list(state)
    n_t = len(tensors)

    class Ref(torch.nn.Module):
        def __init__(self, P, keys):
            super().__init__()
            self.P, self.keys = P, keys

        def forward(self, *args):
            full = dict(self.P.state)
            full.update(dict(zip(self.keys, args[n_t:])))
            out = self.P.call(list(args[:n_t]), full)
            return out if isinstance(out, torch.Tensor) else tuple(out)

    def trace(keys):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.no_grad(), (meta_tracing() if T.device == "meta" else contextlib.nullcontext()):
                tr = torch.jit.trace(Ref(T, keys), tuple(tensors) + tuple(state[k] for k in keys), check_trace=False)
        n = unbake_devices(tr)
        if n:
            info["unbaked_devices"] = n
        return tr, [str(w.message) for w in caught if "Tracer" in type(w.message).__name__]

    try:
        traced, tracer_warnings = trace(keys)
        graph_inputs = list(traced.graph.inputs())[1:]
        used = [k for k, gi in zip(keys, graph_inputs[n_t:]) if len(gi.uses()) > 0]
        if used != keys:  # keep only the weights the traced graph reads
            keys = used
            traced, tracer_warnings = trace(keys)
    except Skip:
        raise
    except Exception as e:
        raise Skip(f"forward cannot be traced to TorchScript: {type(e).__name__}: {str(e).splitlines()[0]}")
    warn = (": " + tracer_warnings[0].splitlines()[0]) if tracer_warnings else ""

    g = torch.Generator().manual_seed(seed + 3)
    if meta:
        # An op with a Python meta kernel (convolution, ...) is recorded by the tracer as the
        # kernel's own shape code (new_empty), not as the op: such a trace is not the forward.
        internal = re.compile(r"torch/_(meta_registrations|refs|prims|decomp)")
        inner = sorted({n.kind() for n in traced.inlined_graph.nodes() if internal.search(n.sourceRange())})
        if inner:
            if lean_bytes(full_a) <= LEAN_SHARE * budget:
                raise _GpuOnly(gpu_only, meta=False)  # traced once on the CPU instead, however slow
            raise Skip(f"{gpu_only}; and on the meta device an op of its forward (with a Python meta kernel) is traced "
                       f"as its shape code ({', '.join(inner[:3])}), while the CPU needs about "
                       f"{gib(lean_bytes(full_a))} to trace it once, over {LEAN_SHARE:.0%} of the {o.memory_gb:g} GiB budget")
        held = meta_tensor_constants(traced)
        if held:
            raise Skip(f"{gpu_only}; and traced on the meta device its reference would hold {len(held)} tensor(s) of "
                       f"the Model that are neither parameters nor buffers, without values")
        with torch.no_grad():
            ref_out = flat_outputs(traced(*tensors, *[state[k] for k in keys]))
        if [(tuple(x.shape), x.dtype) for x in ref_out] != [(tuple(x.shape), x.dtype) for x in out1]:
            raise Skip("the TorchScript trace disagrees with forward on the meta device (output shapes or dtypes)")
        if full_a is not None and [tuple(x.shape) for x in ref_out] != list(full_a["outputs"]):
            raise Skip("the meta trace's output shapes differ from the meta analysis")
    else:
        with torch.no_grad():
            ws = [state[k] for k in keys]
            # (for the GPU only, the run showed the forward writes no input: no clones)
            ref_out = flat_outputs(traced(*(tensors if gpu_only is not None else [t.clone() for t in tensors]), *ws))
            if not close(ref_out, out1):
                raise Skip("the TorchScript trace disagrees with forward on the problem's own inputs")
        if gpu_only is None:  # (for the GPU only: one check run at KernelBench's sizes, the CPU time is short)
            with torch.no_grad():
                alt = [fresh_like(t, g) for t in tensors]
                if not close(flat_outputs(traced(*[t.clone() for t in alt], *ws)), flat_outputs(T.call(alt, dict(state)))):
                    raise Skip("the TorchScript trace disagrees with forward on other inputs (data-dependent control flow"
                               + warn + ")")
                del alt
        if any(o.is_floating_point() and not torch.isfinite(o).all() for o in ref_out):
            raise Skip("the reference produces NaN or inf on the problem's own inputs")
    file_keys = [k for k in keys if rules[k][0] == "file"]

    # 4. Size symbols: module-level ints whose value is unique among them (at KernelBench's sizes).
    F_ints = full_a["ints"] if full_a is not None else module_ints(load_module(path, src))
    by_value = {}
    for k, v in F_ints.items():
        by_value.setdefault(v, []).append(k)
    const_names = {c[0] for c in T.constants}
    out_names = ["out"] if len(ref_out) == 1 else [f"out{i}" for i in range(len(ref_out))]
    all_tensor_names = {T.names[i] for i in T.tensor_idx} | set(wnames[k] for k in keys) | set(out_names)
    # a value several symbols share is named by the first when all of them are literal sizes (they are
    # scaled together)
    symbol_of = {}
    for v, ks in by_value.items():
        if any(k in all_tensor_names or k in const_names for k in ks):
            continue
        named = [k for k in ks if k in base] or (ks if len(ks) == 1 else [])
        if named:
            symbol_of[v] = named[0]
    if full_a is not None:
        F_shapes = list(full_a["inputs"]) + [full_a["weights"][k] for k in keys] + list(full_a["outputs"])
    else:
        if trace_over is not None:
            raise Skip("internal: scaled without a meta analysis")
        F_shapes = [tuple(t.shape) for t in tensors] + [tuple(state[k].shape) for k in keys] + [tuple(x.shape) for x in ref_out]
    exprs = [[symbol_of.get(int(d), str(int(d))) for d in s] for s in F_shapes]
    if full_a is not None:
        fit_derived_dims(path, src, base, full_a, seed, exprs, F_shapes, keys, symbol_of, literals, trace_over)
    used_symbols = {}
    for e in exprs:
        for d in e:
            for name in re.findall(r"[A-Za-z_]\w*", d):
                used_symbols[name] = F_ints[name]

    def eval_shapes(ints):
        return [tuple(eval_dim(d, ints) for d in e) for e in exprs]

    def actual_shapes(P, outs):
        return [tuple(t.shape) for t in P.tensors] + [tuple(P.state[k].shape) for k in keys] + [tuple(x.shape) for x in outs]

    if eval_shapes(T.ints) != actual_shapes(T, ref_out):
        if trace_over is not None:
            raise _GpuOnly("too large or too slow for the CPU checks at KernelBench's sizes, and its shapes at scaled "
                           "sizes do not follow its size symbols")
        # shapes cannot follow the symbols: literal dims only, no cpu variant
        exprs = [[str(int(d)) for d in s] for s in F_shapes]
        used_symbols = {}

    # 5. The cpu sizes: the reference within --cpu-ms on one core, every dimension's role kept.
    file_syms = {n for k in file_keys for d in exprs[n_t + keys.index(k)] for n in re.findall(r"[A-Za-z_]\w*", d)}
    if trace_over is not None and any(trace_over.get(s, F_ints.get(s)) != F_ints.get(s) for s in file_syms):
        raise _GpuOnly("too large or too slow for the CPU checks at KernelBench's sizes, and fixed values that no "
                       "seeded distribution reproduces have a shape that is scaled to fit")
    cpu_over, C, c_out, cpu_note, cpu_ms = None, None, None, None, None
    target_s = o.cpu_ms / 1000.0
    # base symbols that no shape names stay (their dims would change as literals), unless a used
    # symbol is derived from others (then the check below decides)
    derived_used = any(s not in base for s in used_symbols)
    used_vals = set(used_symbols.values())
    frozen = {s for s in base if s in file_syms or (base[s] not in used_vals and not derived_used)}
    ref_a = full_a
    start_a = full_a if trace_over is None else analyze(path, src, trace_over, seed)
    start_over = dict(base) if trace_over is None else dict(trace_over)
    limit_est = target_s / 5 / factor
    torch.set_num_threads(1)
    try:
        for attempt in range(4):
            if not used_symbols or gpu_only is not None:
                break
            base_now = {k: start_over.get(k, v) for k, v in base.items()}
            found = shrink_search(path, src, base_now, start_a, seed, lambda a: est_seconds(a) <= limit_est,
                                  frozen=frozen, literals=literals, best_effort=True) if start_a is not None else None
            if found is None:
                cpu_note = "no smaller sizes keep every dimension's role"
                break
            over = found[0]
            if trace_over is None and all(over.get(k) == base.get(k) for k in base):
                break  # KernelBench's sizes are already small
            if ref_a is not None and not roles_kept(ref_a, found[1]):
                cpu_note = "no smaller sizes keep every dimension's role"
                break
            Cp = Problem(path, src, over, seed, record=True)
            wC = weights_for(Cp)
            if any(k not in wC for k in keys):
                cpu_note = "its parameters differ at other sizes"
                break
            with torch.no_grad():
                eager = flat_outputs(Cp.call([t.clone() for t in Cp.tensors], dict(wC)))
                args = [t.clone() for t in Cp.tensors] + [wC[k] for k in keys]
                t0 = time.perf_counter()
                try:
                    got = flat_outputs(traced(*args))
                except Exception as e:
                    got = None
                    cpu_note = f"the trace does not run at other sizes ({type(e).__name__})"
                dt = time.perf_counter() - t0
                if got is not None:
                    t0 = time.perf_counter()
                    traced(*args)
                    dt = min(dt, time.perf_counter() - t0)
            if got is None:
                break
            if not close(got, eager) or eval_shapes(Cp.ints) != actual_shapes(Cp, got):
                what = "values" if eval_shapes(Cp.ints) == actual_shapes(Cp, got) else \
                    f"shapes {eval_shapes(Cp.ints)} declared, {actual_shapes(Cp, got)} run"
                cpu_note = f"the trace bakes in its sizes (it disagrees with forward at other sizes: {what}" + warn + ")"
                break
            if dt > target_s and attempt < 3 and est_seconds(found[1]) <= limit_est:
                limit_est = limit_est * target_s / dt / 2
                continue
            cpu_over, C, c_out, cpu_ms = over, Cp, got, dt * 1000
            break
    finally:
        torch.set_num_threads(max(1, o.threads))
    if cpu_note and trace_over is not None:
        raise _GpuOnly(f"too large or too slow for the CPU checks at KernelBench's sizes ({o.memory_gb:g} GiB budget, "
                       f"{o.timeout:g} s timeout) and {cpu_note}, so a reference traced at scaled sizes cannot be "
                       f"trusted at full size")
    if gpu_only is not None:
        cpu_note = f"none: for the GPU only ({gpu_only})"
    if cpu_note:
        info["cpu_sizes"] = cpu_note
    if cpu_ms is not None:
        info["cpu_ms"] = round(cpu_ms, 2)
    if trace_over is not None:
        info["traced_sizes"] = {k: v for k, v in T.ints.items() if k in used_symbols}

    # Inputs whose reference needs a domain (NaN or inf on signed inputs) keep their distribution:
    # probed at the cpu sizes when there are some (cheaper), else at the traced sizes.
    P, Pw = (C, weights_for(C)) if C is not None else (T, state)
    # (for the GPU only, nothing is probed: every input keeps its declared distribution, the one
    # KernelBench itself tests with)
    strict = {j for j, t in enumerate(T.tensors) if t.is_floating_point()} if gpu_only is not None else set()
    with torch.no_grad():
        pws = [Pw[k] for k in keys]
        for j, t in ([] if gpu_only is not None else enumerate(P.tensors)):
            if not t.is_floating_point():
                continue
            for scale in (1.0, 100.0):
                trial = [x.clone() for x in P.tensors]
                trial[j] = fresh_like(t, g, scale)
                outs = flat_outputs(traced(*trial, *pws))
                if any(x.is_floating_point() and not torch.isfinite(x).all() for x in outs):
                    strict.add(j)
                    break

    # 6. The task folder, written under a temporary name and renamed when complete.
    task = task_name(level, path)
    tdir = os.path.join(out_dir, task)
    tmp = os.path.join(out_dir, f".tmp-{task}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        os.makedirs(os.path.join(tmp, "weights"))
        lines_in = []

        def shape_text(e):
            return "[" + ", ".join(e) + "]"
        def bound_writer(i):
            """A randint bound of input i as the size symbol it follows (the same value as the
            symbol at the traced sizes and at the cpu sizes, where one of them differs from
            KernelBench's), else the number."""
            bC = C.rec.randint_bounds(C.raw_inputs[i]) if C is not None else None

            def text(k, v):
                for n in used_symbols:
                    if T.ints.get(n) != v or (C is not None and (bC is None or C.ints.get(n) != bC[k])):
                        continue
                    if T.ints.get(n) != F_ints.get(n) or (C is not None and C.ints.get(n) != F_ints.get(n)):
                        return n
                return str(v)
            return text
        for j, i in enumerate(T.tensor_idx):
            t = T.raw_inputs[i]
            init = T.rec.init_of(t, bound_writer(i))
            if j in strict and init is not None:
                init = init[:-1] + ", strict: true}"
            lines_in.append(f"  {T.names[i]}: {{dtype: {dtype_name(t, 'input ' + T.names[i])}, shape: {shape_text(exprs[j])}"
                            + (f", init: {init}" if init else "") + "}")
        weight_bytes = 0
        wC = weights_for(C) if C is not None else state
        # seeded values compared with LibTorch's (below) unless, traced on meta, they are large
        all_bytes = sum(nbytes(t) for t in T.tensors) + sum(nbytes(state[k]) for k in keys)
        compare = not meta or all_bytes <= 2 * GIB
        if meta and compare:
            wC = {k: (generate(rules[k], state[k].shape, wseed[k], state[k].dtype) if rules[k][0] != "file" else None)
                  for k in keys}
        for j, k in enumerate(keys):
            w = state[k]
            dt = dtype_name(w, f"parameter '{k}'")
            r = rules[k]
            if r[0] == "file":
                fname = f"weights/{wnames[k]}.bin"
                if meta:
                    if k not in file_values:
                        raise Skip(f"{gpu_only}; and its parameter '{k}' needs a values file, which cannot be made "
                                   f"without building the Model on the CPU")
                    w = file_values[k]
                wc = w.contiguous().cpu()
                (wc.view(torch.int16) if wc.dtype == torch.bfloat16 else wc).numpy().tofile(os.path.join(tmp, fname))
                weight_bytes += nbytes(wc)
                init = f"{{file: {fname}}}"
            else:
                init = f"{{{r[0]}: {{{'mean' if r[0] == 'normal' else 'low'}: {yaml_float(r[1])}, " \
                       f"{'std' if r[0] == 'normal' else 'high'}: {yaml_float(r[2])}}}, seed: {wseed[k]}}}"
                # the SHA-256 of the values this import used, at the cpu sizes (at KernelBench's when
                # there are none), for the C++ import to compare with LibTorch's draw
                if compare:
                    cw = wC[k].contiguous()
                    os.makedirs(os.path.join(tmp, "weights", ".check"), exist_ok=True)
                    with open(os.path.join(tmp, "weights", ".check", f"{wnames[k]}.sha256"), "w") as f:
                        f.write(hashlib.sha256(memoryview(cw.reshape(-1).view(torch.uint8).numpy())).hexdigest() + "\n")
            lines_in.append(f"  {wnames[k]}: {{dtype: {dt}, shape: {shape_text(exprs[n_t + j])}, init: {init}}}")
        lines_out = [f"  {n}: {{dtype: {dtype_name(x, 'output ' + n)}, shape: {shape_text(exprs[n_t + len(keys) + i])}}}"
                     for i, (n, x) in enumerate(zip(out_names, ref_out))]
        traced.save(os.path.join(tmp, "reference.pt"))
        sha = hashlib.sha256(src.encode("utf-8")).hexdigest()
        y = [f"name: {task}"]
        if level is not None:
            y.append(f"level: {level}")
            y.append(f"category: {CATEGORY.get(level, 'other')}")
        y.append("description: " + yaml_str(f"KernelBench problem {os.path.basename(path)}, imported by "
                                            f"tools/kernelbench_import.py (seed {seed})"))
        y.append("source:")
        y.append("  benchmark: kernelbench")
        if level is not None:
            y.append(f"  level: {level}")
        y.append(f"  problem_id: {pid}")
        y.append("  file: " + yaml_str(os.path.relpath(path, os.path.dirname(os.path.dirname(path)))))
        y.append(f"  sha256: {sha}")
        y.append(f"  seed: {seed}")
        y.append(f"  importer: {IMPORTER_VERSION}")
        y.append(f"  traced_at: {info['traced_at']}"
                 + ("" if trace_over is None else " " + yaml_str(", ".join(f"{k}={v}" for k, v in info["traced_sizes"].items()))))
        if T.batch_norms:
            y.append(f"  batch_norm: {yaml_str(f'{T.batch_norms} training-mode batch norm(s): batch statistics')}")
        if info.get("unbaked_devices"):
            y.append(f"  devices: {yaml_str(str(info['unbaked_devices']) + ' device constant(s) of the trace follow the first input')}")
        if cpu_note:
            y.append(f"  cpu_sizes: {yaml_str(cpu_note)}")
        if cpu_ms is not None:
            y.append(f"  cpu_reference_ms: {cpu_ms:.2f}")
        if C is not None:
            y.append("  cpu_overrides: " + yaml_str(", ".join(f"{k}={v}" for k, v in cpu_over.items() if base.get(k) != v)))
        y.append("prompt: |")
        y += ["  " + line if line.strip() else "" for line in src.rstrip("\n").split("\n")]
        y.append("sizes: {" + ", ".join(f"{k}: {v}" for k, v in used_symbols.items()) + "}")
        if C is not None:
            cs = {k: C.ints[k] for k in used_symbols if C.ints.get(k) != used_symbols[k]}
            if cs:
                y.append("sizes_cpu: {" + ", ".join(f"{k}: {v}" for k, v in cs.items()) + "}")
        elif gpu_only is not None:
            y.append("sizes_cpu: none  # for the GPU only: source.cpu_sizes says why")
        y.append("inputs:")
        y += lines_in
        y.append("outputs:")
        y += lines_out
        if T.constants:
            y.append("constants:")
            for n, v, dt in T.constants:
                y.append(f"  {n}: {{value: {yaml_float(v) if dt == 'float32' else v}, dtype: {dt}}}")
        y.append("reference: {file: reference.pt}")
        y.append(f"tolerance: {{atol: {yaml_float(o.atol)}, rtol: {yaml_float(o.rtol)}}}")
        with open(os.path.join(tmp, "task.yaml"), "w", encoding="utf-8") as f:
            f.write("\n".join(y) + "\n")
        if os.path.isdir(tdir):
            shutil.rmtree(tdir)
        os.rename(tmp, tdir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing half-written
        raise
    info["weight_file_bytes"] = weight_bytes
    return task, info


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
            killed = f"used more than the {o.memory_gb:g} GiB budget ({gib(r)} resident); killed"
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


CHANGES = {4: _changed_in_v4, 5: _changed_in_v5, 6: _changed_in_v6, 7: _changed_in_v7, 8: _changed_in_v8,
           9: _changed_in_v9}
OLDEST_KEPT = 3  # records of older versions are always redone


# Skips a later run tries again: a crash of the problem's process (a signal: a segfault inside torch
# seen once under load and not again, or the kernel's OOM killer acting for another process) says
# nothing certain about the problem. (A budget or timeout skip is the problem's own measure under
# the same settings: kept.)
RETRIED_SKIPS = ("crashed with signal",)


def weight_names(input_names, state):
    """{parameter or buffer name: the task input name it is given}: the name as an identifier
    (non-word characters to "_", "w_" before a leading digit), "_w" appended until it is unique among
    `input_names` and the names given before. The tools that read an imported task back
    (kernelbench_eager.py, bench/kb_reference_eager.py) name the weights with this too."""
    taken = set(input_names)
    out = {}
    for k in state:
        w = re.sub(r"\W", "_", k)
        if w[0].isdigit():
            w = "w_" + w
        while w in taken:
            w += "_w"
        taken.add(w)
        out[k] = w
    return out


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
            print(f"ok    {rel} -> {res['ok']} ({extra})", flush=True)
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


if __name__ == "__main__":
    main()
