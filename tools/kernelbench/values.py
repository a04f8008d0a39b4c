"""Fixed values (parameters and buffers): a seeded distribution's rule, LibTorch's draw, names."""
import math
import re

import torch

from .common import Skip, gib, nbytes


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


def spread_constant(rule):
    """A constant parameter's rule ("normal", c, 0): ("uniform", c - s, c + s) with s = max(|c|, 1) / 2
    (a LayerNorm's ones become U(0.5, 1.5), its zeros U(-0.5, 0.5)), else None. KernelBench's norm
    layers start at the identity (weight 1, bias 0) on every seed, so an answer that ignored the
    affine part passed the check (a tester, 2026-12-07); any values are the problem's function."""
    if rule[0] != "normal" or rule[2] != 0.0:
        return None
    c = float(rule[1])
    s = max(abs(c), 1.0) / 2
    return ("uniform", c - s, c + s)


def generate(rule, shape, seed, dtype):
    """The values LibTorch's make_inputs gives `init: {<rule>, seed: seed}` (same kernel, same order)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.empty(shape, dtype=torch.float32)
    if rule[0] == "uniform":
        t.uniform_(rule[1], rule[2], generator=g)
    else:
        t.normal_(rule[1], rule[2], generator=g)
    return t.to(dtype).contiguous()


def fresh_like(t, g, scale=1.0):
    if t.dtype == torch.bool:
        return torch.rand(t.shape, generator=g) < 0.5
    if not t.is_floating_point():
        lo, hi = int(t.min()), int(t.max()) + 1
        return torch.randint(lo, max(hi, lo + 1), t.shape, generator=g, dtype=t.dtype)
    return (torch.randn(t.shape, generator=g, dtype=torch.float32) * scale).to(t.dtype)


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
