#!/usr/bin/env python3
"""safetensors fixtures for leap's reader/writer tests (needs: safetensors, torch).

  safetensors_fixture.py write OUT_DIR
      Writes OUT_DIR/py.safetensors (F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL, a scalar, an empty
      tensor, __metadata__), a two-shard checkpoint OUT_DIR/sharded/ with
      model.safetensors.index.json, and OUT_DIR/expected.json: name -> {dtype, shape, hex}.
  safetensors_fixture.py check FILE EXPECTED_JSON
      Loads FILE with safetensors.torch and compares every tensor's dtype, shape and bytes (and
      __metadata__) with EXPECTED_JSON. Prints OK, or the first difference and exits 1.
"""
import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

DT = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
      torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
      torch.bool: "BOOL"}


def raw(t):
    t = t.contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def describe(tensors):
    return {k: {"dtype": DT[v.dtype], "shape": list(v.shape), "hex": raw(v).hex()} for k, v in tensors.items()}


def write(out):
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    t = {
        "f64": torch.randn(3, 2, generator=g, dtype=torch.float64),
        "f32": torch.randn(4, 5, generator=g),
        "f16": torch.randn(7, generator=g).half(),
        "bf16": torch.randn(2, 3, 4, generator=g).bfloat16(),
        "i64": torch.arange(-5, 5, dtype=torch.int64),
        "i32": torch.tensor([[1, -2], [2**31 - 1, -2**31]], dtype=torch.int32),
        "i16": torch.tensor([-32768, 0, 32767], dtype=torch.int16),
        "i8": torch.tensor([-128, -1, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 1, 254, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5, dtype=torch.float32),
        "empty": torch.zeros(0, 3, dtype=torch.bfloat16),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8, generator=g).bfloat16(),
    }
    save_file(t, os.path.join(out, "py.safetensors"), metadata={"format": "pt", "who": "leap-test"})
    shard_dir = os.path.join(out, "sharded")
    os.makedirs(shard_dir, exist_ok=True)
    a = {"model.embed_tokens.weight": torch.randn(16, 8, generator=g).bfloat16(),
         "model.norm.weight": torch.ones(8, dtype=torch.bfloat16)}
    b = {"lm_head.weight": torch.randn(16, 8, generator=g).bfloat16(),
         "model.layers.0.mlp.up_proj.weight": torch.randn(12, 8, generator=g).bfloat16()}
    save_file(a, os.path.join(shard_dir, "model-00001-of-00002.safetensors"), metadata={"format": "pt"})
    save_file(b, os.path.join(shard_dir, "model-00002-of-00002.safetensors"), metadata={"format": "pt"})
    wm = {k: "model-00001-of-00002.safetensors" for k in a}
    wm.update({k: "model-00002-of-00002.safetensors" for k in b})
    with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(len(raw(v)) for v in {**a, **b}.values())}, "weight_map": wm}, f)
    exp = {"single": describe(t), "sharded": describe({**a, **b}), "metadata": {"format": "pt", "who": "leap-test"}}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(exp, f)
    print("wrote", out)


def check(path, expected_path):
    with open(expected_path) as f:
        exp = json.load(f)
    got = describe(load_file(path))
    tensors = exp["tensors"]
    if sorted(got) != sorted(tensors):
        sys.exit(f"names differ: python read {sorted(got)}, expected {sorted(tensors)}")
    for k, e in tensors.items():
        if got[k] != e:
            sys.exit(f"tensor {k}: python read {got[k]}, expected {e}")
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    if meta != exp.get("metadata", {}):
        sys.exit(f"metadata: python read {meta}, expected {exp.get('metadata', {})}")
    print("OK", len(got), "tensors")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
