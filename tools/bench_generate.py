#!/usr/bin/env python3
"""Tokens per second of leap's batched sampling (build/bench_generate) against transformers'
generate() on the same random-weight model, alternating the two sides.

Usage: bench_generate.py [--preset tiny|qwen2.5-1.5b] [--device cpu|cuda] [--dtype fp32|bf16]
                         [--batch 1,16,64] [--new-tokens 128] [--prompt-len 16] [--pairs 5]
                         [--bench PATH]
The default preset "tiny" is a Qwen2 config (hidden 128, 4 layers, vocab 1024) for the CPU;
"qwen2.5-1.5b" has Qwen2.5-1.5B's shapes (use --device cuda --dtype bf16).

For each batch size: one warm-up run of each side, then --pairs pairs (transformers, leap,
transformers, leap, ...); leap's side is one process that loads the model once and answers one
timed run per request (bench_generate --serve 1). Printed: every pair, then the median of the
per-pair ratios leap/transformers (tokens/s) with its min and max: on a loaded machine the range
widens instead of the ratio being faked by one lucky or unlucky run.
"""
import argparse
import os
import re
import statistics
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
    ap.add_argument("--batch", default="1,16,64")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--bench", default=os.path.join(os.path.dirname(__file__), "..", "build", "bench_generate"))
    a = ap.parse_args()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    cfg = Qwen2Config(max_position_embeddings=4096, rope_theta=1000000.0, rms_norm_eps=1e-6,
                      bos_token_id=None, eos_token_id=None, pad_token_id=0, **PRESETS[a.preset])
    torch.manual_seed(0)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    with tempfile.TemporaryDirectory() as d:
        model = Qwen2ForCausalLM(cfg).to(dtype)
        model.save_pretrained(d)
        model = model.to(a.device).eval()
        gc = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=a.new_tokens,
                              min_new_tokens=a.new_tokens, pad_token_id=0, eos_token_id=None)
        leap = subprocess.Popen([a.bench, d, "--new-tokens", str(a.new_tokens), "--prompt-len", str(a.prompt_len),
                                 "--device", a.device, "--dtype", a.dtype, "--serve", "1"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

        def leap_tps(b):
            leap.stdin.write(f"{b}\n")
            leap.stdin.flush()
            line = leap.stdout.readline()
            m = re.search(r"tokens_per_s=([\d.]+)", line)
            if not m:
                sys.exit(f"bench_generate failed (exit {leap.poll()}): {line!r}")
            return float(m.group(1))

        def hf_tps(b, ids, att):
            with torch.no_grad():
                sync()
                t0 = time.perf_counter()
                out = model.generate(input_ids=ids, attention_mask=att, generation_config=gc)
                sync()
                s = time.perf_counter() - t0
            return (out.shape[1] - a.prompt_len) * b / s

        summary = []
        for b in [int(x) for x in a.batch.split(",")]:
            ids = torch.tensor([[(i * 7919 + t * 104729 + 17) % cfg.vocab_size for t in range(a.prompt_len)]
                                for i in range(b)], device=a.device)
            att = torch.ones_like(ids)
            hf_tps(b, ids, att)  # warm-up, both sides
            leap_tps(b)
            ratios, hs, ls = [], [], []
            for i in range(a.pairs):
                h = hf_tps(b, ids, att)
                l = leap_tps(b)
                hs.append(h)
                ls.append(l)
                ratios.append(l / h)
                print(f"batch={b} pair {i + 1}: transformers {h:.1f} tok/s, leap {l:.1f} tok/s, ratio {l / h:.2f}",
                      flush=True)
            summary.append(f"batch={b}: ratio leap/transformers median {statistics.median(ratios):.2f} "
                           f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {a.pairs} pairs); medians: leap "
                           f"{statistics.median(ls):.1f} tok/s, transformers {statistics.median(hs):.1f} tok/s")
        leap.stdin.close()
        leap.wait()
        print(f"new_tokens={a.new_tokens} prompt_len={a.prompt_len} device={a.device} dtype={a.dtype} "
              f"torch threads={torch.get_num_threads()}")
        for line in summary:
            print(line)


if __name__ == "__main__":
    main()
