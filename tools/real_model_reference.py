#!/usr/bin/env python3
"""Reference outputs of `transformers` on a real checkpoint folder, for leap's parity test on a
pretrained model (tests/model_real_test.cpp; the SmolLM2 folder of scripts/get-model.sh).

Usage: real_model_reference.py MODEL_DIR OUT_DIR [NEW_TOKENS]
Writes OUT_DIR/chat.json: for each conversation, the prompt text of tokenizer.apply_chat_template
(add_generation_prompt=True) and its token ids; the greedy continuation of generate() over the
left-padded batch (do_sample=False, NEW_TOKENS new tokens (default 64), stop at the eos id, each
row cut after it); and OUT_DIR/reference.safetensors: pad_ids, pad_mask, pad_positions [B, S] and
pad_logits [B, S, V] (fp32 forward over the same left-padded batch).
"""
import json
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

CONVERSATIONS = [
    [{"role": "user", "content": "Write a CUDA kernel that adds two vectors of floats."}],
    [{"role": "system", "content": "You are an expert GPU kernel engineer."},
     {"role": "user", "content": "Explain shared memory in one sentence."}],
    [{"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello! How can I help you today?"},
     {"role": "user", "content": "What is 12 times 12?"}],
]


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    model_dir, out = sys.argv[1], sys.argv[2]
    new_tokens = int(sys.argv[3]) if len(sys.argv) == 4 else 64
    try:
        import torch
        from safetensors.torch import save_file
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        print(f"real_model_reference: {e}", file=sys.stderr)
        return 4
    os.makedirs(out, exist_ok=True)
    # One thread: the test runs beside others under `ctest -j 2`, some of them timing-sensitive.
    torch.set_num_threads(int(os.environ.get("LEAP_REFERENCE_THREADS", "1")))
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in CONVERSATIONS]
    ids = [tok.encode(t, add_special_tokens=False) for t in texts]
    eos = model.generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    S = max(len(x) for x in ids)
    pad_ids = torch.full((len(ids), S), pad, dtype=torch.long)
    mask = torch.zeros((len(ids), S), dtype=torch.long)
    for i, x in enumerate(ids):
        pad_ids[i, S - len(x):] = torch.tensor(x)
        mask[i, S - len(x):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=pad_ids, attention_mask=mask, position_ids=positions).logits.float()
        gen = model.generate(input_ids=pad_ids, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens,
                             eos_token_id=eos, pad_token_id=pad, temperature=None, top_p=None, top_k=None)
    greedy = []
    for row in gen[:, S:].tolist():
        if eos in row:
            row = row[: row.index(eos) + 1]
        greedy.append(row)
    save_file({"pad_ids": pad_ids, "pad_mask": mask, "pad_positions": positions, "pad_logits": logits.contiguous()},
              os.path.join(out, "reference.safetensors"))
    with open(os.path.join(out, "chat.json"), "w", encoding="utf-8") as f:
        json.dump({"conversations": CONVERSATIONS, "texts": texts, "ids": ids, "greedy": greedy, "eos": eos,
                   "new_tokens": new_tokens}, f, ensure_ascii=False)
    print(f"wrote {out}: {len(ids)} prompts of {min(map(len, ids))}-{S} tokens, greedy {[len(g) for g in greedy]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
