#!/usr/bin/env python3
"""Tokens per second of leap's batched sampling (build/bench_generate) against transformers'
generate() on the same random-weight model.

Usage: bench_generate.py [--preset tiny|qwen2.5-1.5b] [--device cpu|cuda] [--dtype fp32|bf16]
                         [--batch 1,16] [--new-tokens 128] [--prompt-len 16] [--bench PATH]
The default preset "tiny" is a Qwen2 config (hidden 128, 4 layers, vocab 1024) for the CPU;
"qwen2.5-1.5b" has Qwen2.5-1.5B's shapes (use --device cuda --dtype bf16).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

PRESETS = {
    "tiny": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=384, vocab_size=1024, tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         intermediate_size=8960, vocab_size=151936, tie_word_embeddings=True),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--bench", default=os.path.join(os.path.dirname(__file__), "..", "build", "bench_generate"))
    a = ap.parse_args()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    cfg = Qwen2Config(max_position_embeddings=4096, rope_theta=1000000.0, rms_norm_eps=1e-6,
                      bos_token_id=None, eos_token_id=None, pad_token_id=0, **PRESETS[a.preset])
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        model = Qwen2ForCausalLM(cfg).to(dtype)
        model.save_pretrained(d)
        model = model.to(a.device).eval()
        gc = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=a.new_tokens,
                              min_new_tokens=a.new_tokens, pad_token_id=0, eos_token_id=None)
        hf = {}
        for b in [int(x) for x in a.batch.split(",")]:
            ids = torch.tensor([[(i * 7919 + t * 104729 + 17) % cfg.vocab_size for t in range(a.prompt_len)]
                                for i in range(b)], device=a.device)
            att = torch.ones_like(ids)
            with torch.no_grad():
                model.generate(input_ids=ids, attention_mask=att, generation_config=GenerationConfig(
                    do_sample=True, max_new_tokens=4, min_new_tokens=4, pad_token_id=0, eos_token_id=None))
                if a.device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = model.generate(input_ids=ids, attention_mask=att, generation_config=gc)
                if a.device == "cuda":
                    torch.cuda.synchronize()
                s = time.perf_counter() - t0
            n = (out.shape[1] - a.prompt_len) * b
            hf[b] = n / s
            print(f"transformers batch={b} new_tokens={a.new_tokens} seconds={s:.3f} tokens_per_s={n / s:.1f}",
                  flush=True)
        del model
        res = subprocess.run([a.bench, d, "--batch", a.batch, "--new-tokens", str(a.new_tokens), "--prompt-len",
                              str(a.prompt_len), "--device", a.device, "--dtype", a.dtype],
                             capture_output=True, text=True)
        sys.stdout.write(res.stdout)
        if res.returncode != 0:
            sys.exit("bench_generate failed:\n" + res.stderr)
        for m in re.finditer(r"leap batch=(\d+) .*tokens_per_s=([\d.]+)", res.stdout):
            b, t = int(m.group(1)), float(m.group(2))
            print(f"batch={b}: leap {t:.1f} tok/s, transformers {hf[b]:.1f} tok/s, ratio leap/transformers "
                  f"{t / hf[b]:.2f}")


if __name__ == "__main__":
    main()
