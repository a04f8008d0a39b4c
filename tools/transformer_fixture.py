#!/usr/bin/env python3
"""Random tiny qwen2 / qwen3 / llama checkpoints and reference outputs from `transformers`, for
leap's transformer parity test.

Usage: transformer_fixture.py OUT_DIR
Writes OUT_DIR/<name>/ (config.json, model.safetensors via save_pretrained, fp32) and
OUT_DIR/<name>/reference.safetensors with
  input_ids [3, 11], logits [3, 11, V]                      (no padding)
  pad_ids, pad_mask, pad_positions [3, 9], pad_logits       (left padded, explicit positions)
and OUT_DIR/<name>/generate.json: prompts of different lengths and the greedy continuations of
transformers generate() (left padding + attention mask, do_sample=False, 32 new tokens, stop at
EOS id 2; each row is cut after its EOS).
"""
import json
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
from safetensors.torch import save_file
from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

NEW_TOKENS = 32
EOS = 2


def specs():
    common = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128, max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1,
                  eos_token_id=EOS, pad_token_id=0)
    return {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM,
                  dict(common, vocab_size=384, rope_theta=1000000.0, tie_word_embeddings=True)),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM,
                  dict(common, vocab_size=320, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=False,
                       attention_bias=False)),
        "llama": (LlamaConfig, LlamaForCausalLM,
                  dict(common, vocab_size=448, rope_theta=500000.0, tie_word_embeddings=False,
                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    }


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)


def main(out):
    torch.manual_seed(0)
    for i, (name, (cfg_cls, model_cls, kw)) in enumerate(specs().items()):
        d = os.path.join(out, name)
        cfg = cfg_cls(**kw)
        model = model_cls(cfg).to(torch.float32)
        randomize(model, 100 + i)
        model.eval()
        model.save_pretrained(d)
        V = cfg.vocab_size
        g = torch.Generator().manual_seed(7 + i)
        ids = torch.randint(3, V, (3, 11), generator=g)
        pad_lens = [0, 3, 5]
        pad_ids = torch.randint(3, V, (3, 9), generator=g)
        pad_mask = torch.ones(3, 9, dtype=torch.long)
        for b, n in enumerate(pad_lens):
            pad_mask[b, :n] = 0
            pad_ids[b, :n] = 0
        pad_pos = (pad_mask.cumsum(-1) - 1).masked_fill(pad_mask == 0, 1)
        with torch.no_grad():
            logits = model(input_ids=ids).logits.float()
            pad_logits = model(input_ids=pad_ids, attention_mask=pad_mask, position_ids=pad_pos).logits.float()
        save_file({"input_ids": ids.contiguous(), "logits": logits.contiguous(), "pad_ids": pad_ids.contiguous(),
                   "pad_mask": pad_mask.contiguous(), "pad_positions": pad_pos.contiguous(),
                   "pad_logits": pad_logits.contiguous()}, os.path.join(d, "reference.safetensors"))

        lengths = [5, 9, 3, 12]
        prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in lengths]
        P = max(lengths)
        inp = torch.zeros(len(prompts), P, dtype=torch.long)
        att = torch.zeros(len(prompts), P, dtype=torch.long)
        for b, p in enumerate(prompts):
            inp[b, P - len(p):] = torch.tensor(p)
            att[b, P - len(p):] = 1
        gc = GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS, pad_token_id=0, eos_token_id=EOS,
                              bos_token_id=None)
        with torch.no_grad():
            res = model.generate(input_ids=inp, attention_mask=att, generation_config=gc)
        # Rows that hit EOS are padded by transformers: keep each row up to and including EOS.
        new = [row[:row.index(EOS) + 1] if EOS in row else row for row in res[:, P:].tolist()]
        with open(os.path.join(d, "generate.json"), "w") as f:
            json.dump({"prompts": prompts, "greedy": new, "new_tokens": NEW_TOKENS, "eos": EOS}, f)
    print("wrote", out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
