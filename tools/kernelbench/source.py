"""Problem files: finding them, reading their size symbols and literals, loading them as modules."""
import ast
import os
import re
import types

from .common import PROBLEM_RE, Skip


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


def sequence_literal(value):
    """The tuple or list literal whose int elements are sizes: `value` itself, or the sequence of a
    repetition `[1024] * 16` / `16 * [1024]` (whose count is not a size); else None."""
    if isinstance(value, (ast.Tuple, ast.List)):
        return value
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult):
        for seq, count in ((value.left, value.right), (value.right, value.left)):
            if isinstance(seq, (ast.Tuple, ast.List)) and const_value(count) is not None:
                return seq
    return None


def _size_targets(node):
    """[(symbol, value)] a module-level assignment defines: `a = b = 128` gives a and b; a tuple or
    list of int literals `shape = (32768, 64)` gives shape_0 and shape_1 (a list once was no size
    at all, and 3_MLP's `layer_sizes = [16384, 16384]` kept a 1-GiB weight at the cpu sizes); a
    repeated one, `hidden = [1024] * 16`, gives hidden_0 for every copy (3_DeepNarrowMLP's was no
    size, and kept 16 1024 x 1024 weights at the cpu sizes); `a, b = 16, 32` gives a and b."""
    unpacked = _unpacked_targets(node)
    if unpacked:
        return unpacked
    if not isinstance(node, ast.Assign) or not all(isinstance(t, ast.Name) for t in node.targets):
        return []
    v = const_value(node.value)
    if v is not None:
        return [(t.id, v) for t in node.targets] if v > 1 else []
    seq = sequence_literal(node.value)
    if seq is not None and len(node.targets) == 1:
        vals = [const_value(e) for e in seq.elts]
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
    sizes = {id(n) for node in tree.body if isinstance(node, ast.Assign) and _size_targets(node)
             for n in ast.walk(node.value)}
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
            elif sequence_literal(node.value) is not None:
                name, seq = node.targets[0].id, sequence_literal(node.value)
                for i, e in enumerate(seq.elts):
                    if f"{name}_{i}" in overrides:
                        seq.elts[i] = ast.copy_location(ast.Constant(overrides[f"{name}_{i}"]), e)
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
    """The module's int globals (> 1), and the int elements of its tuple and list globals as <name>_<i>."""
    out = {}
    for k, v in vars(mod).items():
        if k.startswith("_") or not re.fullmatch(r"[A-Za-z_]\w*", k):
            continue
        if type(v) is int and v > 1:
            out[k] = v
        elif isinstance(v, (tuple, list)) and v and all(type(x) is int for x in v):
            for i, x in enumerate(v):
                if x > 1 and f"{k}_{i}" not in vars(mod):
                    out[f"{k}_{i}"] = x
    return out
