#!/usr/bin/env python3
"""Converts KernelBench problem files into leap task folders (run by `leap tasks import kernelbench`).

Usage: kernelbench_import.py KB_DIR --out DIR [--levels 1,2,3] [--seed 42] [--atol 1e-4] [--rtol 1e-4]
KB_DIR is a KernelBench checkout (holding KernelBench/level<N>/) or any folder of `<id>_<Name>.py`
problem files (a folder named level<N> gives level N; another folder gives no level).

Per problem (docs/kernelbench.md has the details):
- the module is built from get_init_inputs() under torch.manual_seed(seed); its parameters and
  buffers become explicit inputs whose fixed values are saved as raw little-endian files in
  <task>/weights/ (task.yaml: `init: {file: weights/<name>.bin}`), so reference and candidate use
  the same weights;
- tensor inputs are named after forward()'s parameters; shapes and dtypes come from get_inputs()
  (run once under the same seed; int and bool inputs keep their dtype); Python scalars become
  task constants whose value the reference keeps as a literal;
- the reference is forward() traced to TorchScript (reference.pt) taking inputs + parameters;
  output shapes and dtypes come from one reference run;
- the prompt is the problem's source; `source:` records the level, problem id and sha256.
Problems that cannot be converted are listed with the reason in <out>/skipped.yaml.
Exit status: 0 (some or no problems skipped), 2 bad usage, 4 torch missing.
"""
import argparse
import hashlib
import inspect
import math
import os
import re
import shutil
import signal
import sys
import traceback
import types
import warnings

try:
    import torch
except ImportError as e:  # the C++ command turns exit 4 into a clear message
    sys.stderr.write(f"kernelbench_import: cannot import torch ({e}); run scripts/setup.sh or set LEAP_PYTHON\n")
    sys.exit(4)

PROBLEM_RE = re.compile(r"^(\d+)_([A-Za-z0-9_]+)\.py$")
CATEGORY = {1: "operator", 2: "fusion", 3: "network", 4: "model"}


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


def yaml_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


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

    def init_of(self, t):
        """init mapping text for input tensor t."""
        rec = self.seen.get(id(t))
        if rec is not None and rec[3] is t:
            name, a, k = rec[0], rec[1], rec[2]
            if name == "rand":
                return "{uniform: {low: 0, high: 1}}"
            if name == "randn":
                return "{normal: {mean: 0, std: 1}}"
            ints = [x for x in a if isinstance(x, int)]
            low, high = (0, ints[0]) if len(ints) == 1 else (ints[0], ints[1]) if len(ints) >= 2 else (None, None)
            low, high = k.get("low", low), k.get("high", high)
            if low is not None and high is not None:
                return f"{{randint: {{low: {low}, high: {high}}}}}"
        if t.dtype == torch.bool:
            return None
        if not t.is_floating_point():  # integer tensor of unknown origin: the observed range
            return f"{{randint: {{low: {int(t.min())}, high: {int(t.max()) + 1}}}}}"
        f = t.double()
        lo, hi = float(f.min()), float(f.max())
        if lo >= 0:
            return f"{{uniform: {{low: {yaml_float(round(lo, 6))}, high: {yaml_float(round(max(hi, lo + 1e-6), 6))}}}}}"
        return f"{{normal: {{mean: {yaml_float(round(float(f.mean()), 6))}, std: {yaml_float(round(float(f.std()), 6))}}}}}"


def flat_outputs(out, what="the output"):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return list(out)
    raise Skip(f"forward returns {type(out).__name__}, not a tensor or a tuple of tensors")


def same(a, b):
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def close(a, b):
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and
        (torch.allclose(x, y, atol=1e-5, rtol=1e-5, equal_nan=True) if x.is_floating_point() else torch.equal(x, y))
        for x, y in zip(a, b))


def call_with(model, weights, args):
    """model(*args) with its parameters and buffers replaced by `weights` (name -> tensor) for the call.
    (torch.func.functional_call refuses to run under torch.jit.trace, so the swap is done by hand.)"""
    saved = []
    try:
        for k, v in weights.items():
            path, _, attr = k.rpartition(".")
            sub = model.get_submodule(path) if path else model
            table = sub._parameters if attr in sub._parameters else sub._buffers
            saved.append((table, attr, table[attr]))
            table[attr] = v
        return model(*args)
    finally:
        for table, attr, old in reversed(saved):
            table[attr] = old


def load_module(path):
    src = open(path, encoding="utf-8").read()
    mod = types.ModuleType("kb_problem")
    mod.__file__ = path
    try:
        exec(compile(src, path, "exec"), mod.__dict__)
    except Exception as e:
        raise Skip(f"the file does not run: {type(e).__name__}: {e}")
    for n in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, n):
            raise Skip(f"the file defines no {n}")
    return src, mod


def convert(level, pid, path, out_dir, seed, atol, rtol):
    """Writes one task folder; returns its name. Raises Skip with the reason."""
    if level == 4:
        raise Skip("level 4 problems need Hugging Face model downloads (out of scope)")
    src, mod = load_module(path)
    torch.manual_seed(seed)
    model = mod.Model(*mod.get_init_inputs())
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0:
            raise Skip("dropout in training mode makes the reference non-deterministic")
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training:
            raise Skip("batch norm in training mode (KernelBench never calls eval()) uses batch statistics and "
                       "updates its running stats: the reference would change between calls")
    torch.manual_seed(seed)
    with Recorder() as rec:
        raw_inputs = list(mod.get_inputs())
    # Names from forward's signature.
    sig = inspect.signature(model.forward)
    params = [p for p in sig.parameters.values()]
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        names = [f"in{i}" for i in range(len(raw_inputs))]
    else:
        names = [p.name for p in params][:len(raw_inputs)]
        if len(names) != len(raw_inputs):
            raise Skip(f"get_inputs() returns {len(raw_inputs)} values but forward takes {len(names)}")
    tensor_idx, constants = [], []
    for i, (n, v) in enumerate(zip(names, raw_inputs)):
        if isinstance(v, torch.Tensor):
            tensor_idx.append(i)
        elif isinstance(v, bool) or isinstance(v, int):
            constants.append((n, int(v), "int64"))
        elif isinstance(v, float):
            constants.append((n, v, "float32"))
        else:
            raise Skip(f"input '{n}' is a {type(v).__name__}, neither a tensor nor a number")
    state = dict(model.named_parameters())
    state.update(dict(model.named_buffers()))
    state = {k: v.detach() for k, v in state.items()}

    def call(tensors, weights):
        args = list(raw_inputs)
        for i, t in zip(tensor_idx, tensors):
            args[i] = t
        return call_with(model, weights, args)

    tensors = [raw_inputs[i] for i in tensor_idx]
    with torch.no_grad():
        before = {k: v.clone() for k, v in state.items()}
        torch.manual_seed(seed + 1)
        out1 = flat_outputs(call([t.clone() for t in tensors], dict(before)))
        torch.manual_seed(seed + 2)
        out2 = flat_outputs(call([t.clone() for t in tensors], {k: v.clone() for k, v in before.items()}))
        if not same(out1, out2):
            raise Skip("forward is not deterministic (dropout or another random op): two runs on the same inputs differ")
        probe = {k: v.clone() for k, v in before.items()}
        call([t.clone() for t in tensors], probe)
        if any(not torch.equal(probe[k], before[k]) for k in probe):
            raise Skip("forward updates its own buffers (training-mode batch norm or similar)")
        for i, t in enumerate(tensors):
            if not torch.equal(t, raw_inputs[tensor_idx[i]]):
                raise Skip(f"forward modifies its input '{names[tensor_idx[i]]}' in place")

    # Parameter / buffer names as identifiers, unique among the inputs.
    taken = set(names)
    wnames = {}
    for k in state:
        w = re.sub(r"\W", "_", k)
        if w[0].isdigit():
            w = "w_" + w
        while w in taken:
            w += "_w"
        taken.add(w)
        wnames[k] = w
    keys = list(state)

    class Ref(torch.nn.Module):
        def __init__(self, keys):
            super().__init__()
            self.keys = keys

        def forward(self, *args):
            ts = args[:len(tensors)]
            ws = dict(zip(self.keys, args[len(tensors):]))
            full = dict(state)
            full.update(ws)
            out = call(list(ts), full)
            return out if isinstance(out, torch.Tensor) else tuple(out)

    def trace(keys):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.no_grad():
                tr = torch.jit.trace(Ref(keys), tuple(tensors) + tuple(state[k] for k in keys), check_trace=False)
        return tr, [str(w.message) for w in caught if "Tracer" in type(w.message).__name__]

    try:
        traced, tracer_warnings = trace(keys)
        # Keep only the weights the traced graph reads.
        graph_inputs = list(traced.graph.inputs())[1:]
        used = [k for k, gi in zip(keys, graph_inputs[len(tensors):]) if len(gi.uses()) > 0]
        if used != keys:
            keys = used
            traced, tracer_warnings = trace(keys)
    except Skip:
        raise
    except Exception as e:
        raise Skip(f"forward cannot be traced to TorchScript: {type(e).__name__}: {str(e).splitlines()[0]}")

    # The trace must agree with eager PyTorch on fresh inputs from other distributions.
    g = torch.Generator().manual_seed(seed + 3)

    def fresh(t, scale=1.0):
        if t.dtype == torch.bool:
            return torch.rand(t.shape, generator=g) < 0.5
        if not t.is_floating_point():
            lo, hi = int(t.min()), int(t.max()) + 1
            return torch.randint(lo, max(hi, lo + 1), t.shape, generator=g, dtype=t.dtype)
        return (torch.randn(t.shape, generator=g, dtype=torch.float32) * scale).to(t.dtype)

    with torch.no_grad():
        ws = [state[k] for k in keys]
        ref_out = flat_outputs(traced(*[t.clone() for t in tensors], *ws))
        if not close(ref_out, out1):
            raise Skip("the TorchScript trace disagrees with forward on the problem's own inputs")
        alt = [fresh(t) for t in tensors]
        if not close(flat_outputs(traced(*[t.clone() for t in alt], *ws)), flat_outputs(call(alt, dict(state)))):
            raise Skip("the TorchScript trace disagrees with forward on other inputs (data-dependent control flow"
                       + (": " + tracer_warnings[0].splitlines()[0] if tracer_warnings else "") + ")")
        # Inputs whose reference needs a domain (NaN or inf on signed inputs) keep their distribution.
        strict = set()
        for j, t in enumerate(tensors):
            if not t.is_floating_point():
                continue
            for scale in (1.0, 100.0):
                trial = [x.clone() for x in tensors]
                trial[j] = fresh(t, scale)
                outs = flat_outputs(traced(*trial, *ws))
                if any(o.is_floating_point() and not torch.isfinite(o).all() for o in outs):
                    strict.add(j)
                    break
        if any(o.is_floating_point() and not torch.isfinite(o).all() for o in ref_out):
            raise Skip("the reference produces NaN or inf on the problem's own inputs")

    # Size symbols: module-level ints whose value is unique among them (and > 1).
    globals_ints = [(k, v) for k, v in vars(mod).items()
                    if not k.startswith("_") and type(v) is int and v > 1 and re.fullmatch(r"[A-Za-z_]\w*", k)]
    by_value = {}
    for k, v in globals_ints:
        by_value.setdefault(v, []).append(k)
    const_names = {c[0] for c in constants}
    out_names = ["out"] if len(ref_out) == 1 else [f"out{i}" for i in range(len(ref_out))]
    all_tensor_names = {names[i] for i in tensor_idx} | set(wnames[k] for k in keys) | set(out_names)
    symbol_of = {v: ks[0] for v, ks in by_value.items()
                 if len(ks) == 1 and ks[0] not in all_tensor_names and ks[0] not in const_names}
    used_symbols = {}

    def shape_of(t):
        dims = []
        for d in t.shape:
            s = symbol_of.get(int(d))
            if s is not None:
                used_symbols[s] = int(d)
                dims.append(s)
            else:
                dims.append(str(int(d)))
        return "[" + ", ".join(dims) + "]"

    task = f"l{level}_{pid:03d}_{snake(os.path.splitext(os.path.basename(path))[0].split('_', 1)[1])}" \
        if level is not None else f"{pid:03d}_{snake(os.path.splitext(os.path.basename(path))[0].split('_', 1)[1])}"
    tdir = os.path.join(out_dir, task)
    existed = os.path.isdir(tdir)
    try:
        os.makedirs(os.path.join(tdir, "weights"), exist_ok=True)
        for f in os.listdir(os.path.join(tdir, "weights")):
            os.remove(os.path.join(tdir, "weights", f))
        lines_in = []
        for j, i in enumerate(tensor_idx):
            t = raw_inputs[i]
            init = rec.init_of(t)
            if j in strict and init is not None:
                init = init[:-1] + ", strict: true}"
            lines_in.append(f"  {names[i]}: {{dtype: {dtype_name(t, 'input ' + names[i])}, shape: {shape_of(t)}"
                            + (f", init: {init}" if init else "") + "}")
        for k in keys:
            w = state[k].contiguous()
            dt = dtype_name(w, f"parameter '{k}'")
            fname = f"weights/{wnames[k]}.bin"
            w.cpu().numpy().tofile(os.path.join(tdir, fname)) if w.dtype != torch.bfloat16 else \
                w.cpu().view(torch.int16).numpy().tofile(os.path.join(tdir, fname))
            lines_in.append(f"  {wnames[k]}: {{dtype: {dt}, shape: {shape_of(w)}, init: {{file: {fname}}}}}")
        lines_out = [f"  {n}: {{dtype: {dtype_name(o, 'output ' + n)}, shape: {shape_of(o)}}}"
                     for n, o in zip(out_names, ref_out)]
        traced.save(os.path.join(tdir, "reference.pt"))
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
        y.append("prompt: |")
        y += ["  " + line if line.strip() else "" for line in src.rstrip("\n").split("\n")]
        y.append("sizes: {" + ", ".join(f"{k}: {v}" for k, v in used_symbols.items()) + "}")
        y.append("inputs:")
        y += lines_in
        y.append("outputs:")
        y += lines_out
        if constants:
            y.append("constants:")
            for n, v, dt in constants:
                y.append(f"  {n}: {{value: {yaml_float(v) if dt == 'float32' else v}, dtype: {dt}}}")
        y.append("reference: {file: reference.pt}")
        y.append(f"tolerance: {{atol: {yaml_float(atol)}, rtol: {yaml_float(rtol)}}}")
        with open(os.path.join(tdir, "task.yaml"), "w", encoding="utf-8") as f:
            f.write("\n".join(y) + "\n")
    except BaseException:
        # nothing half-written: a task folder this call created goes again
        if not existed:
            shutil.rmtree(tdir, ignore_errors=True)
        raise
    return task


class ProblemTimeout(BaseException):
    """Raised by SIGALRM when one problem runs past --timeout (a BaseException, so the problem's
    own `except Exception` cannot swallow it)."""


def _on_alarm(signum, frame):
    raise ProblemTimeout()


def main():
    signal.signal(signal.SIGALRM, _on_alarm)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kb_dir")
    ap.add_argument("--out", required=True)
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds one problem may take (running its Model included); 0 = no limit")
    a = ap.parse_args()
    if not os.path.isdir(a.kb_dir):
        sys.stderr.write(f"kernelbench_import: {a.kb_dir} is not a folder\n")
        sys.exit(2)
    try:
        levels = {int(x) for x in a.levels.split(",") if x.strip()}
    except ValueError:
        sys.stderr.write(f"kernelbench_import: --levels {a.levels}: expected comma-separated integers\n")
        sys.exit(2)
    problems = find_problems(a.kb_dir, levels)
    if not problems:
        sys.stderr.write(f"kernelbench_import: no problem files (<id>_<Name>.py) under {a.kb_dir}"
                         f" (nor KernelBench/level<N>/ for levels {a.levels})\n")
        sys.exit(2)
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    done, skipped = [], []
    for level, pid, path in problems:
        rel = os.path.relpath(path, a.kb_dir)
        try:
            if a.timeout > 0:
                signal.setitimer(signal.ITIMER_REAL, a.timeout)
            try:
                task = convert(level, pid, path, a.out, a.seed, a.atol, a.rtol)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            done.append(task)
            print(f"ok    {rel} -> {task}", flush=True)
        except ProblemTimeout:
            msg = f"took longer than --timeout {a.timeout:g} s"
            skipped.append((rel, level, pid, msg))
            print(f"skip  {rel}: {msg}", flush=True)
        except SystemExit as e:  # the problem file called exit() / sys.exit()
            msg = f"the file calls exit({e.code!r})"
            skipped.append((rel, level, pid, msg))
            print(f"skip  {rel}: {msg}", flush=True)
        except Skip as e:
            skipped.append((rel, level, pid, str(e)))
            print(f"skip  {rel}: {e}", flush=True)
        except Exception as e:  # a bug here must not hide the other problems
            msg = f"import failed: {type(e).__name__}: {e}"
            skipped.append((rel, level, pid, msg))
            print(f"skip  {rel}: {msg}", flush=True)
            traceback.print_exc(limit=3)
    with open(os.path.join(a.out, "skipped.yaml"), "w", encoding="utf-8") as f:
        f.write("# KernelBench problems that were not converted, with the reason (tools/kernelbench_import.py)\n")
        f.write("skipped:\n" if skipped else "skipped: []\n")
        for rel, level, pid, reason in skipped:
            f.write(f"  - {{file: {yaml_str(rel)}, level: {level if level is not None else 'null'}, "
                    f"problem_id: {pid}, reason: {yaml_str(reason)}}}\n")
    set_yaml = os.path.join(a.out, "set.yaml")
    with open(set_yaml, "w", encoding="utf-8") as f:
        f.write("name: kernelbench\n")
        f.write("description: " + yaml_str(f"KernelBench problems imported from {os.path.abspath(a.kb_dir)}") + "\n")
    print(f"{len(done)} problems imported into {a.out}, {len(skipped)} skipped"
          + (f" (reasons in {os.path.join(a.out, 'skipped.yaml')})" if skipped else ""), flush=True)


if __name__ == "__main__":
    main()
