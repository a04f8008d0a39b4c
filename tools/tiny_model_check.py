#!/usr/bin/env python3
"""Checks a `leap model init` folder with the Python stack.

Usage: tiny_model_check.py MODEL_DIR STRINGS_JSON OUT_DIR
Loads MODEL_DIR/tokenizer.json with `tokenizers` and encodes every string of STRINGS_JSON (a JSON
list), loads the checkpoint with transformers AutoModelForCausalLM (fp32) and runs it on the
encoding of the first string. Writes OUT_DIR/encodings.json and OUT_DIR/logits.safetensors
(input_ids [1, T], logits [1, T, V]).
"""
import json
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM


def main(model_dir, strings_path, out):
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    with open(strings_path) as f:
        strings = json.load(f)
    enc = [tok.encode(s, add_special_tokens=False).ids for s in strings]
    dec = [tok.decode(e, skip_special_tokens=False) for e in enc]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "encodings.json"), "w") as f:
        json.dump({"ids": enc, "decoded": dec, "vocab_size": tok.get_vocab_size()}, f)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    ids = torch.tensor([enc[0]], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    save_file({"input_ids": ids.contiguous(), "logits": logits.contiguous()}, os.path.join(out, "logits.safetensors"))
    print("ok")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
