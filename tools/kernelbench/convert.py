"""One problem converted into a task folder (convert_at and its steps)."""
import contextlib
import hashlib
import os
import re
import shutil
import time
import warnings

import torch

from .common import BASE_BYTES, CATEGORY, GIB, IMPORTER_VERSION, LEAN_SHARE, Skip, dtype_name, gib, nbytes, task_name, yaml_float, yaml_str
from .source import base_symbols, load_module, module_ints, source_literals
from .problem import Problem, analyze, dims_of, est_seconds, flat_outputs, lean_bytes, need_bytes, roles_kept
from .sizes import eval_dim, fit_derived_dims, halve, shrink_search
from .values import fresh_like, generate, rules_by_module, spread_constant, weight_names, weight_rule
from .tracing import close, lean_checks, meta_tensor_constants, meta_tracing, same, unbake_devices


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


def convert_at(level, pid, path, out_dir, o, factor, gpu_only=None, meta=None):
    """convert() with the time estimates multiplied by `factor`. With `gpu_only` (the reason), the
    problem is imported at KernelBench's sizes only, for the GPU (no cpu sizes): traced on the CPU
    when its runs fit the budget and the timeout there, else (`meta`) on the meta device with its
    shapes checked. Returns (task, info); raises Skip with the reason, _GpuOnly or _Rescale."""
    if level == 4:
        raise Skip("level 4 problems need Hugging Face model downloads (out of scope)")
    c = Conversion(level, pid, path, o, factor, gpu_only, meta)
    c.analyse_full_size()      # 1. KernelBench's sizes, on the meta device
    c.choose_trace_sizes()     # 2. the sizes it is traced and checked at
    c.build_traced_problem()
    c.choose_value_rules()     # 3. fixed values: a seeded distribution where one fits, else a file
    c.check_forward()
    c.trace_reference()
    c.check_trace()
    c.symbolic_shapes()        # 4. size symbols and the shapes written with them
    c.find_cpu_sizes()         # 5. the cpu sizes: the reference within --cpu-ms on one core
    c.find_strict_inputs()
    return c.write_task(out_dir)  # 6. the task folder


class Conversion:
    """The state of one problem's conversion (convert_at), built up by its steps in order."""

    RUNS = 8  # forward calls of the checks at the traced sizes

    def __init__(self, level, pid, path, o, factor, gpu_only, meta):
        self.level, self.pid, self.path, self.o, self.factor = level, pid, path, o, factor
        self.gpu_only, self.meta = gpu_only, meta
        self.src = open(path, encoding="utf-8").read()
        self.seed = o.seed
        self.budget = o.memory_gb * GIB
        self.base = base_symbols(self.src)
        self.literals = source_literals(self.src)
        self.info = {}
        self.untie_groups = []
        self.full_a = None
        self.trace_over = None
        self.T = None

    # ---- 1-2. the sizes --------------------------------------------------------------------

    def analyse_full_size(self):
        """full_a: the meta analysis at KernelBench's sizes (None, with info["meta"], when it fails)."""
        try:
            self.full_a = analyze(self.path, self.src, None, self.seed)
        except Skip:
            raise
        except Exception as e:
            self.full_a = None
            self.info["meta"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]

    def fits_budget(self, a):
        o = self.o
        return need_bytes(a) <= 0.6 * self.budget and \
            (o.timeout <= 0 or self.RUNS * self.factor * est_seconds(a) <= 0.15 * o.timeout)

    def fits_scaled(self, a):  # once scaled, small enough to be quick
        o = self.o
        return need_bytes(a) <= min(0.6 * self.budget, BASE_BYTES + 0.25 * GIB) and \
            (o.timeout <= 0 or self.RUNS * self.factor * est_seconds(a) <= 0.01 * o.timeout)

    def choose_trace_sizes(self):
        """trace_over: KernelBench's sizes (None) when they fit the budget and the timeout, else
        scaled values of the size symbols; for the GPU only, whether to trace on the meta device.
        Raises _GpuOnly when no scaled sizes fit, Skip when the problem cannot be sized at all."""
        o, full_a, budget = self.o, self.full_a, self.budget
        if self.gpu_only is not None:
            if full_a is None:
                raise Skip(f"{self.gpu_only}; and it cannot be analysed on the meta device to import it for the GPU "
                           f"({self.info['meta']})")
            # traced once on the CPU at KernelBench's sizes when memory allows and three forwards (run,
            # trace, trace check) fit half the timeout; else on the meta device, shapes checked
            if self.meta is None:
                self.meta = lean_bytes(full_a) > LEAN_SHARE * budget or \
                    (o.timeout > 0 and 3 * self.factor * est_seconds(full_a) > 0.5 * o.timeout)
            self.info["gpu_only"] = self.gpu_only
        elif full_a is not None:
            if not self.fits_budget(full_a):
                vals = {d for sh in dims_of(full_a) for d in sh}
                derived = any(v in vals for k, v in full_a["ints"].items() if k not in self.base)
                fz = {k for k, v in self.base.items() if v not in vals and not derived}
                found = shrink_search(self.path, self.src, self.base, full_a, self.seed, self.fits_scaled,
                                      literals=self.literals, frozen=fz) or \
                    shrink_search(self.path, self.src, self.base, full_a, self.seed, self.fits_budget,
                                  literals=self.literals, frozen=fz)
                if found is None:
                    raise _GpuOnly(f"needs about {gib(need_bytes(full_a))} and "
                                   f"{self.RUNS * self.factor * est_seconds(full_a):.0f} s "
                                   f"(estimated) for the CPU checks at KernelBench's sizes, over 60% of the "
                                   f"{o.memory_gb:g} GiB budget or 15% of the {o.timeout:g} s timeout, and no smaller "
                                   f"values of its size symbols fit")
                self.trace_over = found[0]
        else:  # no meta run: judge by the inputs and weights alone (those run on meta in nearly all problems)
            try:
                pm = Problem(self.path, self.src, None, self.seed, device="meta")
                rough = BASE_BYTES + 5 * sum(nbytes(t) for t in pm.tensors) + \
                    3 * sum(nbytes(v) for v in pm.state.values())
            except Skip:
                raise
            except Exception:
                rough = 0
            if rough > 0.6 * budget:
                raise Skip(f"needs about {gib(rough)} at KernelBench's sizes (over the {o.memory_gb:g} GiB budget) and "
                           f"cannot be analysed on the meta device to scale it ({self.info['meta']})")

    def build_traced_problem(self):
        """T: the problem at the traced sizes, on the CPU (or the meta device), its calls recorded."""
        self.T = T = Problem(self.path, self.src, self.trace_over, self.seed, device="meta" if self.meta else "cpu",
                             record=True)
        self.info["traced_at"] = "kernelbench" if self.trace_over is None else "scaled"
        if self.meta:
            self.info["traced_at"] = "kernelbench (meta device)"
        if T.batch_norms:
            self.info["batch_norm"] = T.batch_norms

    # ---- 3. fixed values and the checks of forward ------------------------------------------

    def choose_value_rules(self):
        """rules and wseed: each fixed value's seeded distribution, or a file (judged on
        KernelBench's values when only the inputs were too large: small scaled weights would not
        pass the fit); state: the values at the traced sizes."""
        T, full_a = self.T, self.full_a
        W = T
        if (self.trace_over is not None or self.meta) and full_a is not None and full_a["w_bytes"] <= 0.2 * self.budget:
            try:
                W = Problem(self.path, self.src, None, self.seed, inputs=False)
            except Exception:
                W = T
        self.rules, self.wseed = {}, {}
        if W.device == "meta":  # too large to build whole on the CPU
            self.rules = rules_by_module(Problem(self.path, self.src, None, self.seed, device="meta", inputs=False),
                                         self.seed)
        for j, (k, v) in enumerate(T.state.items()):
            if W.device != "meta":
                self.rules[k] = weight_rule(W.state.get(k, v))
            self.wseed[k] = (self.seed * 1000003 + self.pid * 1009 + j * 7919 + 1) % (1 << 31)
        # Constant parameters (a norm layer's weight 1 and bias 0) drawn around their value, so
        # the check sees an answer that ignores them; buffers (running statistics) stay as they are.
        self.spread = {}
        for k, v in T.state.items():
            r = self.rules.get(k, ("file",))
            wider = spread_constant(r) if k in T.param_names and v.is_floating_point() else None
            if wider is not None:
                self.spread[k] = r
                self.rules[k] = wider
        self.file_values = {k: W.state[k] for k in T.state
                            if self.rules.get(k, ("file",))[0] == "file" and W.device != "meta"}
        self.state = self.weights_for(T)
        self.tensors = T.tensors

    def unspread(self):
        """Back to the constant values of spread parameters (their spread made the forward
        non-finite, say a sqrt of a weight): True when there were any."""
        if not self.spread:
            return False
        self.rules.update(self.spread)
        self.spread = {}
        self.state = self.weights_for(self.T)
        return True

    def weights_for(self, P):
        """The fixed values of problem P: its own for file values, else drawn by the rule."""
        ws = {}
        for k, v in P.state.items():
            r = self.rules.get(k, ("file",))
            if P.device == "meta":
                ws[k] = v  # shapes only
            else:
                ws[k] = v.clone() if r[0] == "file" else generate(r, v.shape, self.wseed[k], v.dtype)
        return ws

    def check_forward(self):
        """out1: forward's outputs. Deterministic, no update of its own buffers or inputs (for the
        GPU only: one run, its checks read from the run). Raises _Rescale when the run was much
        slower than estimated."""
        T, state, tensors, o, seed = self.T, self.state, self.tensors, self.o, self.seed
        if self.gpu_only is not None and not self.meta:  # one copy of the weights: the seeded ones replace the Model's
            T.adopt(state)
        if self.gpu_only is not None:  # one run, its checks read from the run (random ops, version counters)
            self.out1 = lean_checks(T, state)
            return
        with torch.no_grad():
            torch.manual_seed(seed + 1)
            t0 = time.perf_counter()
            self.out1 = flat_outputs(T.call([t.clone() for t in tensors], dict(state)))
            dt1 = time.perf_counter() - t0
            if o.timeout > 0 and self.factor == 1.0 and self.RUNS * dt1 > 0.3 * o.timeout:
                a_T = self.full_a if self.trace_over is None else \
                    analyze(self.path, self.src, self.trace_over, seed) if self.full_a is not None else None
                if a_T is not None and est_seconds(a_T) > 0:
                    raise _Rescale(max(2.0, dt1 / est_seconds(a_T)))
            if any(x.is_floating_point() and not torch.isfinite(x).all() for x in self.out1) and self.unspread():
                return self.check_forward()  # the spread weights made NaN or inf: the constants
            torch.manual_seed(seed + 2)
            out2 = flat_outputs(T.call([t.clone() for t in tensors], {k: v.clone() for k, v in state.items()}))
            if not same(self.out1, out2):
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

    # ---- the TorchScript reference ----------------------------------------------------------

    def _trace(self, keys):
        """The TorchScript trace of forward with the fixed values `keys` as inputs, and the
        tracer's warnings."""
        T, tensors, state, n_t = self.T, self.tensors, self.state, len(self.tensors)

        class Ref(torch.nn.Module):
            def __init__(self, P, keys):
                super().__init__()
                self.P, self.keys = P, keys

            def forward(self, *args):
                full = dict(self.P.state)
                full.update(dict(zip(self.keys, args[n_t:])))
                out = self.P.call(list(args[:n_t]), full)
                return out if isinstance(out, torch.Tensor) else tuple(out)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.no_grad(), (meta_tracing() if T.device == "meta" else contextlib.nullcontext()):
                tr = torch.jit.trace(Ref(T, keys), tuple(tensors) + tuple(state[k] for k in keys), check_trace=False)
        n = unbake_devices(tr)
        if n:
            self.info["unbaked_devices"] = n
        return tr, [str(w.message) for w in caught if "Tracer" in type(w.message).__name__]

    def trace_reference(self):
        """traced: the reference, reading only the fixed values (keys) its graph uses."""
        self.wnames = weight_names(self.T.names, self.state)  # parameter / buffer names as identifiers
        keys = list(self.state)
        n_t = len(self.tensors)
        try:
            traced, tracer_warnings = self._trace(keys)
            graph_inputs = list(traced.graph.inputs())[1:]
            used = [k for k, gi in zip(keys, graph_inputs[n_t:]) if len(gi.uses()) > 0]
            if used != keys:  # keep only the weights the traced graph reads
                keys = used
                traced, tracer_warnings = self._trace(keys)
        except Skip:
            raise
        except Exception as e:
            raise Skip(f"forward cannot be traced to TorchScript: {type(e).__name__}: {str(e).splitlines()[0]}")
        self.keys, self.traced = keys, traced
        self.warn = (": " + tracer_warnings[0].splitlines()[0]) if tracer_warnings else ""

    def check_trace(self):
        """ref_out: the trace's outputs on the problem's inputs, checked against forward (on other
        inputs too); on the meta device, its op kinds and shapes checked instead."""
        self.g = torch.Generator().manual_seed(self.seed + 3)
        if self.meta:
            self._check_meta_trace()
        else:
            self._check_cpu_trace()
        self.file_keys = [k for k in self.keys if self.rules[k][0] == "file"]

    def _check_meta_trace(self):
        traced, full_a, budget, o = self.traced, self.full_a, self.budget, self.o
        # An op with a Python meta kernel (convolution, ...) is recorded by the tracer as the
        # kernel's own shape code (new_empty), not as the op: such a trace is not the forward.
        internal = re.compile(r"torch/_(meta_registrations|refs|prims|decomp)")
        inner = sorted({n.kind() for n in traced.inlined_graph.nodes() if internal.search(n.sourceRange())})
        if inner:
            if lean_bytes(full_a) <= LEAN_SHARE * budget:
                raise _GpuOnly(self.gpu_only, meta=False)  # traced once on the CPU instead, however slow
            raise Skip(f"{self.gpu_only}; and on the meta device an op of its forward (with a Python meta kernel) is traced "
                       f"as its shape code ({', '.join(inner[:3])}), while the CPU needs about "
                       f"{gib(lean_bytes(full_a))} to trace it once, over {LEAN_SHARE:.0%} of the {o.memory_gb:g} GiB budget")
        held = meta_tensor_constants(traced)
        if held:
            raise Skip(f"{self.gpu_only}; and traced on the meta device its reference would hold {len(held)} tensor(s) of "
                       f"the Model that are neither parameters nor buffers, without values")
        with torch.no_grad():
            self.ref_out = flat_outputs(traced(*self.tensors, *[self.state[k] for k in self.keys]))
        if [(tuple(x.shape), x.dtype) for x in self.ref_out] != [(tuple(x.shape), x.dtype) for x in self.out1]:
            raise Skip("the TorchScript trace disagrees with forward on the meta device (output shapes or dtypes)")
        if full_a is not None and [tuple(x.shape) for x in self.ref_out] != list(full_a["outputs"]):
            raise Skip("the meta trace's output shapes differ from the meta analysis")

    def _check_cpu_trace(self):
        traced, tensors, state, T = self.traced, self.tensors, self.state, self.T
        with torch.no_grad():
            ws = [state[k] for k in self.keys]
            # (for the GPU only, the run showed the forward writes no input: no clones)
            self.ref_out = flat_outputs(traced(*(tensors if self.gpu_only is not None else [t.clone() for t in tensors]),
                                               *ws))
            if not close(self.ref_out, self.out1):
                raise Skip("the TorchScript trace disagrees with forward on the problem's own inputs")
        if self.gpu_only is None:  # (for the GPU only: one check run at KernelBench's sizes, the CPU time is short)
            with torch.no_grad():
                alt = [fresh_like(t, self.g) for t in tensors]
                if not close(flat_outputs(traced(*[t.clone() for t in alt], *ws)), flat_outputs(T.call(alt, dict(state)))):
                    raise Skip("the TorchScript trace disagrees with forward on other inputs (data-dependent control flow"
                               + self.warn + ")")
                del alt
        if any(o.is_floating_point() and not torch.isfinite(o).all() for o in self.ref_out):
            raise Skip("the reference produces NaN or inf on the problem's own inputs")

    # ---- 4. size symbols --------------------------------------------------------------------

    def symbolic_shapes(self):
        """exprs: every input, fixed value and output shape with its dimensions written as size
        symbols (module-level ints whose value is unique among them, at KernelBench's sizes);
        used_symbols: those the shapes name, at KernelBench's values."""
        T, full_a, keys, ref_out = self.T, self.full_a, self.keys, self.ref_out
        self.F_ints = F_ints = full_a["ints"] if full_a is not None else module_ints(load_module(self.path, self.src))
        by_value = {}
        for k, v in F_ints.items():
            by_value.setdefault(v, []).append(k)
        const_names = {c[0] for c in T.constants}
        self.out_names = ["out"] if len(ref_out) == 1 else [f"out{i}" for i in range(len(ref_out))]
        all_tensor_names = {T.names[i] for i in T.tensor_idx} | set(self.wnames[k] for k in keys) | set(self.out_names)
        # a value several symbols share is named by the first when all of them are literal sizes (they are
        # scaled together)
        symbol_of = {}
        for v, ks in by_value.items():
            if any(k in all_tensor_names or k in const_names for k in ks):
                continue
            named = [k for k in ks if k in self.base] or (ks if len(ks) == 1 else [])
            if named:
                symbol_of[v] = named[0]
        if full_a is not None:
            F_shapes = list(full_a["inputs"]) + [full_a["weights"][k] for k in keys] + list(full_a["outputs"])
        else:
            if self.trace_over is not None:
                raise Skip("internal: scaled without a meta analysis")
            F_shapes = [tuple(t.shape) for t in self.tensors] + [tuple(self.state[k].shape) for k in keys] + \
                [tuple(x.shape) for x in ref_out]
        self.exprs = [[symbol_of.get(int(d), str(int(d))) for d in s] for s in F_shapes]
        if full_a is not None:
            self.name_shared_values(by_value, symbol_of, F_shapes, keys)
            fit_derived_dims(self.path, self.src, self.base, full_a, self.seed, self.exprs, F_shapes, keys, symbol_of,
                             self.literals, self.trace_over)
        self.used_symbols = {}
        for e in self.exprs:
            for d in e:
                for name in re.findall(r"[A-Za-z_]\w*", d):
                    self.used_symbols[name] = F_ints[name]
        if self.eval_shapes(T.ints) != self.actual_shapes(T, ref_out):
            if self.trace_over is not None:
                raise _GpuOnly("too large or too slow for the CPU checks at KernelBench's sizes, and its shapes at scaled "
                               "sizes do not follow its size symbols")
            # shapes cannot follow the symbols: literal dims only, no cpu variant
            self.exprs = [[str(int(d)) for d in s] for s in F_shapes]
            self.used_symbols = {}

    def name_shared_values(self, by_value, symbol_of, F_shapes, keys):
        """A value several size symbols share names each of its dims by the symbol it follows:
        the problem analysed (meta device) with one of them moved alone shows which dims move with
        it. 3_DeepNarrowMLP's hidden weights were `[batch_size, batch_size]` since batch_size =
        1024 = hidden_layer_sizes_0; they are `[hidden_layer_sizes_0, hidden_layer_sizes_0]`. A
        dim that follows none of them alone, or several, keeps the first symbol's name. The
        symbols still move together in the size search (the source may rely on their equality)."""
        all_values = set(self.base.values())
        self.untie_groups = []  # per shared value, the symbols some dim follows alone (_untie_cpu_sizes)
        for v, ks in by_value.items():
            named = [k for k in ks if k in self.base]
            if len(named) < 2 or symbol_of.get(v) not in named:
                continue
            probe_v = next((x for x in (v // 2, v - 1, v + 1, 2 * v) if x >= 2 and x not in all_values), None)
            if probe_v is None:
                continue
            follows = {}  # (i, j) -> symbols whose move alone moves that dim to probe_v
            for k in named:
                over = dict(self.base)
                over[k] = probe_v
                try:
                    a = analyze(self.path, self.src, over, self.seed)
                except Exception:
                    continue
                shapes = list(a["inputs"]) + [a["weights"].get(w) for w in keys] + list(a["outputs"])
                if len(shapes) != len(F_shapes) or any(x is None or len(x) != len(y) for x, y in zip(shapes, F_shapes)):
                    continue
                for i, sh in enumerate(F_shapes):
                    for j, d in enumerate(sh):
                        if d == v and shapes[i][j] == probe_v:
                            follows.setdefault((i, j), []).append(k)
            alone = set()
            for (i, j), who in follows.items():
                if len(who) == 1 and self.exprs[i][j] == symbol_of[v]:
                    self.exprs[i][j] = who[0]
                    alone.add(who[0])
            if len(alone) >= 2:
                self.untie_groups.append(sorted(alone, key=named.index))

    def eval_shapes(self, ints):
        """The shapes of exprs at the symbol values `ints`."""
        return [tuple(eval_dim(d, ints) for d in e) for e in self.exprs]

    def actual_shapes(self, P, outs):
        """The shapes problem P runs with: inputs, the fixed values kept, outputs `outs`."""
        return [tuple(t.shape) for t in P.tensors] + [tuple(P.state[k].shape) for k in self.keys] + \
            [tuple(x.shape) for x in outs]

    # ---- 5. the cpu sizes -------------------------------------------------------------------

    def find_cpu_sizes(self):
        """cpu_over, C and cpu_ms: the cpu sizes (every dimension's role kept, the reference within
        --cpu-ms on one core), the problem there and its reference's time; or cpu_note saying
        why there are none. Raises _GpuOnly when scaled traced sizes would then be untrusted."""
        o, base, F_ints, trace_over = self.o, self.base, self.F_ints, self.trace_over
        n_t = len(self.tensors)
        file_syms = {n for k in self.file_keys for d in self.exprs[n_t + self.keys.index(k)]
                     for n in re.findall(r"[A-Za-z_]\w*", d)}
        if trace_over is not None and any(trace_over.get(s, F_ints.get(s)) != F_ints.get(s) for s in file_syms):
            raise _GpuOnly("too large or too slow for the CPU checks at KernelBench's sizes, and fixed values that no "
                           "seeded distribution reproduces have a shape that is scaled to fit")
        self.cpu_over, self.C, self.cpu_note, self.cpu_ms = None, None, None, None
        # base symbols that no shape names stay (their dims would change as literals), unless a used
        # symbol is derived from others (then the check below decides)
        derived_used = any(s not in base for s in self.used_symbols)
        used_vals = set(self.used_symbols.values())
        frozen = {s for s in base if s in file_syms or (base[s] not in used_vals and not derived_used)}
        start_a = self.full_a if trace_over is None else analyze(self.path, self.src, trace_over, self.seed)
        start_over = dict(base) if trace_over is None else dict(trace_over)
        torch.set_num_threads(1)
        try:
            self._search_cpu_sizes(frozen, start_a, start_over)
            if self.gpu_only is None and not self.cpu_note and (trace_over is None or self.cpu_over is not None):
                self._untie_cpu_sizes(frozen)
        finally:
            torch.set_num_threads(max(1, o.threads))
        if self.cpu_note and trace_over is not None:
            raise _GpuOnly(f"too large or too slow for the CPU checks at KernelBench's sizes ({o.memory_gb:g} GiB budget, "
                           f"{o.timeout:g} s timeout) and {self.cpu_note}, so a reference traced at scaled sizes cannot be "
                           f"trusted at full size")
        if self.gpu_only is not None:
            self.cpu_note = f"none: for the GPU only ({self.gpu_only})"
        if self.cpu_note:
            self.info["cpu_sizes"] = self.cpu_note
        if self.cpu_ms is not None:
            self.info["cpu_ms"] = round(self.cpu_ms, 2)
        if trace_over is not None:
            self.info["traced_sizes"] = {k: v for k, v in self.T.ints.items() if k in self.used_symbols}

    def _untie_cpu_sizes(self, frozen):
        """Symbols of equal value whose dims name_shared_values told apart (`M = N = 1024`) moved
        together in the size search, so a kernel that swaps their dims was right at the cpu sizes
        too. Here each group's later members get smaller, distinct values (halved once more per
        member) where the problem, its trace and its shapes agree there and no divisibility the
        full sizes have between symbols is lost; else the cpu sizes stay as found."""
        base = self.base
        start = dict(self.cpu_over) if self.cpu_over is not None else dict(base)
        for group in self.untie_groups:
            if any(k in frozen for k in group) or len({start.get(k, base[k]) for k in group}) != 1:
                continue
            cand, x = dict(start), start.get(group[0], base[group[0]])
            for k in group[1:]:
                x = halve(x)
                cand[k] = x
            if x < 4:
                continue
            pairs = [(a, b) for a in base for b in base if base[a] != base[b] and base[a] % base[b] == 0]
            if any(cand[a] % cand[b] for a, b in pairs):
                continue
            if any(cand[a] == cand[b] for a in base for b in base if base[a] != base[b]):
                continue  # a new tie with another symbol (shrink_search keeps different values apart)
            checked = self._check_cpu_over(cand)
            if checked is not None:
                start = cand
                self.cpu_over, self.C, self.cpu_ms = cand, checked[0], checked[1]
                self.info.setdefault("cpu_untied", []).append(",".join(group))
        if "cpu_untied" in self.info:
            self.info["cpu_untied"] = "; ".join(self.info["cpu_untied"])

    def _check_cpu_over(self, over):
        """(problem, reference ms) at the symbol values `over` when every dimension keeps its role,
        the trace agrees with forward there, the declared shapes hold and the reference runs within
        --cpu-ms on one core; else None."""
        try:
            a = analyze(self.path, self.src, over, self.seed)
        except Exception:
            return None
        if self.full_a is not None and not roles_kept(self.full_a, a):
            return None
        try:
            Cp = Problem(self.path, self.src, over, self.seed, record=True)
        except Exception:
            return None
        wC = self.weights_for(Cp)
        if any(k not in wC for k in self.keys):
            return None
        with torch.no_grad():
            try:
                eager = flat_outputs(Cp.call([t.clone() for t in Cp.tensors], dict(wC)))
                args = [t.clone() for t in Cp.tensors] + [wC[k] for k in self.keys]
                got = flat_outputs(self.traced(*args))
                t0 = time.perf_counter()
                self.traced(*args)
                dt = time.perf_counter() - t0
            except Exception:
                return None
        if not close(got, eager) or self.eval_shapes(Cp.ints) != self.actual_shapes(Cp, got):
            return None
        if dt * 1000 > self.o.cpu_ms:
            return None
        return Cp, dt * 1000

    def _search_cpu_sizes(self, frozen, start_a, start_over):
        """The size search; where the trace fails at the sizes found (it does not run there, or it
        bakes in a size: `groups=in_channels` of a depthwise conv traced as a constant), again with
        one of the symbols those sizes changed held at its value, each in turn (up to 8), then all
        symbols but one: so a
        problem whose trace bakes in one size still gets cpu sizes from the others (l1_086's
        in_channels; before, it fell back to KernelBench's sizes and was killed at 11.8 GiB)."""
        failed = self._search_cpu_sizes_once(frozen, start_a, start_over)
        if failed is None:
            return
        note = self.cpu_note
        changed = sorted(k for k in self.base if failed.get(k) != self.base.get(k) and k not in frozen)
        # one symbol held, each in turn; then all but one (l1_040's layer norm bakes in every
        # dim of normalized_shape: only the batch may move)
        movable = sorted(k for k in self.base if k not in frozen)
        tries = [[k] for k in changed[:8]]
        if len(movable) > 2:
            tries += [[j for j in movable if j != k] for k in movable[:8]]
        best = None  # (cpu_ms, cpu_over, C, keep): the fastest reference found, the first within --cpu-ms
        for keep in tries:
            self.cpu_note, self.cpu_over = None, None
            if self._search_cpu_sizes_once(set(frozen) | set(keep), start_a, start_over) is None and self.cpu_over is not None:
                if best is None or self.cpu_ms < best[0]:
                    best = (self.cpu_ms, self.cpu_over, self.C, keep)
                if self.cpu_ms <= self.o.cpu_ms:
                    break
        if best is not None:
            self.cpu_ms, self.cpu_over, self.C, keep = best
            self.cpu_note = None
            self.info["cpu_sizes_keep"] = ",".join(keep)
            return
        self.cpu_over, self.C, self.cpu_ms = None, None, None
        self.cpu_note = note

    def _search_cpu_sizes_once(self, frozen, start_a, start_over):
        """Up to four tries of the size search from the analysis `start_a` at the symbol values
        `start_over`, each measured on the trace (one core). Returns the sizes where the trace
        failed (cpu_note says how), else None (cpu_over set, or cpu_note saying why not)."""
        base, traced, keys = self.base, self.traced, self.keys
        target_s = self.o.cpu_ms / 1000.0
        ref_a = self.full_a
        limit_est = target_s / 5 / self.factor
        for attempt in range(4):
            if not self.used_symbols or self.gpu_only is not None:
                break
            base_now = {k: start_over.get(k, v) for k, v in base.items()}
            found = shrink_search(self.path, self.src, base_now, start_a, self.seed, lambda a: est_seconds(a) <= limit_est,
                                  frozen=frozen, literals=self.literals, best_effort=True) if start_a is not None else None
            if found is None:
                self.cpu_note = "no smaller sizes keep every dimension's role"
                break
            over = found[0]
            if self.trace_over is None and all(over.get(k) == base.get(k) for k in base):
                break  # KernelBench's sizes are already small
            if ref_a is not None and not roles_kept(ref_a, found[1]):
                self.cpu_note = "no smaller sizes keep every dimension's role"
                break
            Cp = Problem(self.path, self.src, over, self.seed, record=True)
            wC = self.weights_for(Cp)
            if any(k not in wC for k in keys):
                self.cpu_note = "its parameters differ at other sizes"
                break
            with torch.no_grad():
                eager = flat_outputs(Cp.call([t.clone() for t in Cp.tensors], dict(wC)))
                args = [t.clone() for t in Cp.tensors] + [wC[k] for k in keys]
                t0 = time.perf_counter()
                try:
                    got = flat_outputs(traced(*args))
                except Exception as e:
                    got = None
                    self.cpu_note = f"the trace does not run at other sizes ({type(e).__name__})"
                dt = time.perf_counter() - t0
                if got is not None:
                    t0 = time.perf_counter()
                    traced(*args)
                    dt = min(dt, time.perf_counter() - t0)
            if got is None:
                return over
            if not close(got, eager) or self.eval_shapes(Cp.ints) != self.actual_shapes(Cp, got):
                what = "values" if self.eval_shapes(Cp.ints) == self.actual_shapes(Cp, got) else \
                    f"shapes {self.eval_shapes(Cp.ints)} declared, {self.actual_shapes(Cp, got)} run"
                self.cpu_note = f"the trace bakes in its sizes (it disagrees with forward at other sizes: {what}" + \
                    self.warn + ")"
                return over
            if dt > target_s and attempt < 3 and est_seconds(found[1]) <= limit_est:
                limit_est = limit_est * target_s / dt / 2
                continue
            self.cpu_over, self.C, self.cpu_ms = over, Cp, dt * 1000
            break
        return None

    def find_strict_inputs(self):
        """strict: inputs whose reference needs a domain (NaN or inf on signed inputs) keep their
        distribution: probed at the cpu sizes when there are some (cheaper), else at the traced
        sizes (for the GPU only, nothing is probed: every input keeps its declared distribution,
        the one KernelBench itself tests with)."""
        C, T = self.C, self.T
        P, Pw = (C, self.weights_for(C)) if C is not None else (T, self.state)
        self.strict = {j for j, t in enumerate(T.tensors) if t.is_floating_point()} if self.gpu_only is not None else set()
        with torch.no_grad():
            pws = [Pw[k] for k in self.keys]
            for j, t in ([] if self.gpu_only is not None else enumerate(P.tensors)):
                if not t.is_floating_point():
                    continue
                for scale in (1.0, 100.0):
                    trial = [x.clone() for x in P.tensors]
                    trial[j] = fresh_like(t, self.g, scale)
                    outs = flat_outputs(self.traced(*trial, *pws))
                    if any(x.is_floating_point() and not torch.isfinite(x).all() for x in outs):
                        self.strict.add(j)
                        break

    # ---- 6. the task folder -----------------------------------------------------------------

    def write_task(self, out_dir):
        """Writes the task folder under a temporary name and renames it when complete (nothing
        half-written). Returns (task, info)."""
        task = task_name(self.level, self.path)
        tdir = os.path.join(out_dir, task)
        tmp = os.path.join(out_dir, f".tmp-{task}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            os.makedirs(os.path.join(tmp, "weights"))
            lines_in = self.input_lines()
            weight_lines, weight_bytes = self.write_values(tmp)
            lines_in += weight_lines
            lines_out = [f"  {n}: {{dtype: {dtype_name(x, 'output ' + n)}, "
                         f"shape: {shape_text(self.exprs[len(self.tensors) + len(self.keys) + i])}}}"
                         for i, (n, x) in enumerate(zip(self.out_names, self.ref_out))]
            self.traced.save(os.path.join(tmp, "reference.pt"))
            y = self.task_yaml(task, lines_in, lines_out)
            with open(os.path.join(tmp, "task.yaml"), "w", encoding="utf-8") as f:
                f.write("\n".join(y) + "\n")
            if os.path.isdir(tdir):
                shutil.rmtree(tdir)
            os.rename(tmp, tdir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # nothing half-written
            raise
        self.info["weight_file_bytes"] = weight_bytes
        return task, self.info

    def _bound_writer(self, i):
        """A randint bound of input i as the size symbol it follows (the same value as the symbol
        at the traced sizes and at the cpu sizes, where one of them differs from KernelBench's),
        else the number."""
        T, C, F_ints = self.T, self.C, self.F_ints
        bC = C.rec.randint_bounds(C.raw_inputs[i]) if C is not None else None

        def text(k, v):
            for n in self.used_symbols:
                if T.ints.get(n) != v or (C is not None and (bC is None or C.ints.get(n) != bC[k])):
                    continue
                if T.ints.get(n) != F_ints.get(n) or (C is not None and C.ints.get(n) != F_ints.get(n)):
                    return n
            return str(v)
        return text

    def input_lines(self):
        """task.yaml's lines of the inputs: dtype, symbolic shape, init."""
        T = self.T
        lines = []
        for j, i in enumerate(T.tensor_idx):
            t = T.raw_inputs[i]
            init = T.rec.init_of(t, self._bound_writer(i))
            if j in self.strict and init is not None:
                init = init[:-1] + ", strict: true}"
            lines.append(f"  {T.names[i]}: {{dtype: {dtype_name(t, 'input ' + T.names[i])}, shape: {shape_text(self.exprs[j])}"
                         + (f", init: {init}" if init else "") + "}")
        return lines

    def write_values(self, tmp):
        """task.yaml's lines of the fixed values (a seeded rule, or a file written under tmp), the
        SHA-256 of each seeded one's values for the C++ import to compare with LibTorch's draw;
        returns (lines, bytes of the files)."""
        state, keys, rules, meta = self.state, self.keys, self.rules, self.meta
        n_t = len(self.tensors)
        weight_bytes, lines = 0, []
        wC = self.weights_for(self.C) if self.C is not None else state
        # seeded values compared with LibTorch's (below) unless, traced on meta, they are large
        all_bytes = sum(nbytes(t) for t in self.T.tensors) + sum(nbytes(state[k]) for k in keys)
        compare = not meta or all_bytes <= 2 * GIB
        if meta and compare:
            wC = {k: (generate(rules[k], state[k].shape, self.wseed[k], state[k].dtype) if rules[k][0] != "file" else None)
                  for k in keys}
        for j, k in enumerate(keys):
            w = state[k]
            dt = dtype_name(w, f"parameter '{k}'")
            r = rules[k]
            wname = self.wnames[k]
            if r[0] == "file":
                fname = f"weights/{wname}.bin"
                if meta:
                    if k not in self.file_values:
                        raise Skip(f"{self.gpu_only}; and its parameter '{k}' needs a values file, which cannot be made "
                                   f"without building the Model on the CPU")
                    w = self.file_values[k]
                wc = w.contiguous().cpu()
                (wc.view(torch.int16) if wc.dtype == torch.bfloat16 else wc).numpy().tofile(os.path.join(tmp, fname))
                weight_bytes += nbytes(wc)
                init = f"{{file: {fname}}}"
            else:
                init = f"{{{r[0]}: {{{'mean' if r[0] == 'normal' else 'low'}: {yaml_float(r[1])}, " \
                       f"{'std' if r[0] == 'normal' else 'high'}: {yaml_float(r[2])}}}, seed: {self.wseed[k]}}}"
                # the SHA-256 of the values this import used, at the cpu sizes (at KernelBench's when
                # there are none), for the C++ import to compare with LibTorch's draw
                if compare:
                    cw = wC[k].contiguous()
                    os.makedirs(os.path.join(tmp, "weights", ".check"), exist_ok=True)
                    with open(os.path.join(tmp, "weights", ".check", f"{wname}.sha256"), "w") as f:
                        f.write(hashlib.sha256(memoryview(cw.reshape(-1).view(torch.uint8).numpy())).hexdigest() + "\n")
            lines.append(f"  {wname}: {{dtype: {dt}, shape: {shape_text(self.exprs[n_t + j])}, init: {init}}}")
        return lines, weight_bytes

    def task_yaml(self, task, lines_in, lines_out):
        """task.yaml's lines: name, level, source record, prompt, sizes, inputs, outputs,
        constants, reference and tolerance."""
        T, C, info, o, level, path, seed = self.T, self.C, self.info, self.o, self.level, self.path, self.seed
        sha = hashlib.sha256(self.src.encode("utf-8")).hexdigest()
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
        y.append(f"  problem_id: {self.pid}")
        y.append("  file: " + yaml_str(os.path.relpath(path, os.path.dirname(os.path.dirname(path)))))
        y.append(f"  sha256: {sha}")
        y.append(f"  seed: {seed}")
        y.append(f"  importer: {IMPORTER_VERSION}")
        y.append(f"  traced_at: {info['traced_at']}"
                 + ("" if self.trace_over is None else
                    " " + yaml_str(", ".join(f"{k}={v}" for k, v in info["traced_sizes"].items()))))
        if T.batch_norms:
            y.append(f"  batch_norm: {yaml_str(f'{T.batch_norms} training-mode batch norm(s): batch statistics')}")
        if info.get("unbaked_devices"):
            y.append(f"  devices: {yaml_str(str(info['unbaked_devices']) + ' device constant(s) of the trace follow the first input')}")
        if self.cpu_note:
            y.append(f"  cpu_sizes: {yaml_str(self.cpu_note)}")
        if self.cpu_ms is not None:
            y.append(f"  cpu_reference_ms: {self.cpu_ms:.2f}")
        if C is not None:
            y.append("  cpu_overrides: " + yaml_str(", ".join(f"{k}={v}" for k, v in self.cpu_over.items()
                                                              if self.base.get(k) != v)))
        if info.get("cpu_untied"):
            y.append("  cpu_untied: " + yaml_str(info["cpu_untied"] + ": equal at KernelBench's sizes, distinct at the "
                                                 "cpu sizes"))
        y.append("prompt: |")
        y += ["  " + line if line.strip() else "" for line in self.src.rstrip("\n").split("\n")]
        y.append("sizes: {" + ", ".join(f"{k}: {v}" for k, v in self.used_symbols.items()) + "}")
        if C is not None:
            cs = {k: C.ints[k] for k in self.used_symbols if C.ints.get(k) != self.used_symbols[k]}
            if cs:
                y.append("sizes_cpu: {" + ", ".join(f"{k}: {v}" for k, v in cs.items()) + "}")
        elif self.gpu_only is not None:
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
        return y


def shape_text(e):
    """A symbolic shape as task.yaml writes it: "[N, C, 2 * H]"."""
    return "[" + ", ".join(e) + "]"
