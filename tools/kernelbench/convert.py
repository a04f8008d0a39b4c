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
from .sizes import eval_dim, fit_derived_dims, shrink_search
from .values import fresh_like, generate, rules_by_module, weight_names, weight_rule
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
