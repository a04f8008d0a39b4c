"""A problem's Model and inputs (on the CPU or the meta device) and its analysis at given sizes."""
import inspect
import weakref

import torch
import torch.utils._python_dispatch

from .common import BASE_BYTES, BYTES_PER_S, FLOPS_PER_S, Skip, nbytes, yaml_float
from .source import load_module, module_ints


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
        self.param_names = set(state)  # parameters (weights), not buffers (running statistics)
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
