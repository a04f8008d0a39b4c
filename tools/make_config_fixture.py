#!/usr/bin/env python3
"""config.json fixtures from `transformers` for leap's config parser test.

Usage: make_config_fixture.py OUT_DIR
Writes OUT_DIR/<qwen2|qwen3|llama>/config.json (+ generation_config.json) via save_pretrained,
and OUT_DIR/<name>/expected.json with the values transformers itself reports for them.
"""
import json
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from transformers import GenerationConfig, LlamaConfig, Qwen2Config, Qwen3Config


def rope(c):
    p = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    theta = p.get("rope_theta", getattr(c, "rope_theta", None))
    return theta, p


def main(out):
    specs = {
        "qwen2": (Qwen2Config, dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                                    num_key_value_heads=2, intermediate_size=160, vocab_size=151936,
                                    max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                    tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645,
                                    torch_dtype="bfloat16"),
                  dict(do_sample=True, bos_token_id=151643, eos_token_id=[151645, 151643], pad_token_id=151643,
                       temperature=0.7, top_p=0.8, top_k=20)),
        "qwen3": (Qwen3Config, dict(hidden_size=96, num_hidden_layers=2, num_attention_heads=6,
                                    num_key_value_heads=3, head_dim=32, intermediate_size=192, vocab_size=151936,
                                    max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                    tie_word_embeddings=True, attention_bias=False, eos_token_id=151645,
                                    torch_dtype="bfloat16"),
                  dict(do_sample=True, eos_token_id=[151645, 151643], temperature=0.6, top_p=0.95, top_k=20)),
        "llama": (LlamaConfig, dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=8,
                                    num_key_value_heads=2, intermediate_size=256, vocab_size=128256,
                                    max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0,
                                                  "original_max_position_embeddings": 8192},
                                    tie_word_embeddings=False, bos_token_id=128000,
                                    eos_token_id=[128001, 128008, 128009], torch_dtype="bfloat16"),
                  dict(do_sample=True, bos_token_id=128000, eos_token_id=[128001, 128008, 128009], temperature=0.6, top_p=0.9)),
    }
    for name, (cls, kw, gkw) in specs.items():
        c = cls(**kw)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        c.save_pretrained(d)
        GenerationConfig(**gkw).save_pretrained(d)
        c = cls.from_pretrained(d)
        theta, p = rope(c)
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        eos = c.eos_token_id if isinstance(c.eos_token_id, list) else [c.eos_token_id]
        exp = {"model_type": c.model_type, "hidden_size": c.hidden_size, "num_hidden_layers": c.num_hidden_layers,
               "num_attention_heads": c.num_attention_heads, "num_key_value_heads": c.num_key_value_heads,
               "head_dim": head_dim, "intermediate_size": c.intermediate_size, "vocab_size": c.vocab_size,
               "max_position_embeddings": c.max_position_embeddings, "rms_norm_eps": c.rms_norm_eps,
               "rope_theta": theta, "rope_type": p.get("rope_type", p.get("type", "default")),
               "rope_factor": p.get("factor", 1.0), "low_freq_factor": p.get("low_freq_factor", 1.0),
               "high_freq_factor": p.get("high_freq_factor", 4.0),
               "original_max_position_embeddings": p.get("original_max_position_embeddings", 0),
               "tie_word_embeddings": c.tie_word_embeddings, "bos_token_id": c.bos_token_id, "eos_token_ids": eos,
               "attention_bias": getattr(c, "attention_bias", None),
               "generation_eos": gkw["eos_token_id"]}
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(exp, f, indent=1)
    print("wrote", out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
