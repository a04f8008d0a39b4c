"""TorchScript tracing helpers: device constants, output comparison, checks read from one run, the meta device."""
import re

import torch
import torch.utils._python_dispatch

from .common import Skip
from .problem import flat_outputs


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
