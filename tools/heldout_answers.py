#!/usr/bin/env python3
"""Greedy turn-1 answers of a checkpoint on a split of a generated task set, compared line by line
with each task's shipped solution (docs/results.md, 2026-12-03: what the warm start gets wrong).

Usage: python tools/heldout_answers.py CKPT TASK_SET STORE [--split eval] [--limit 60] [--json OUT]

CKPT is a Hugging Face checkpoint folder (a run's checkpoints/step-N), TASK_SET a generated set
(`leap tasks generate`), STORE a leap SQLite store holding at least one turn-1 rollout on the same
backend: the prompt layout (system prompt, chat markers, the example answer) is taken from that
stored prompt, with its task message replaced by each task's, so no prompt text is written here.
Decoding is greedy (Hugging Face transformers), at most 320 new tokens, as the shipped eval.

Prints one line per task whose answer is not the solution: 'C' if a comment line differs (the
prompt was not copied), 'L' if only code lines differ; then the counts.
"""
import argparse, collections, json, re, sqlite3, sys

import torch
import yaml
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM


def code_lines(text):
    m = re.search(r"```cpp\n(.*?)```", text, re.S)
    return m.group(1).splitlines() if m else []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt"), ap.add_argument("task_set"), ap.add_argument("store")
    ap.add_argument("--split", default="eval"), ap.add_argument("--limit", type=int, default=60)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    row = sqlite3.connect(a.store).execute("SELECT prompt FROM turns WHERE turn_index = 1 LIMIT 1").fetchone()
    if row is None:
        sys.exit(f"{a.store}: no turn-1 prompt stored")
    tmpl = row[0]
    start, end = tmpl.find("Task "), tmpl.find("Example task:")
    if start < 0 or end < 0:
        sys.exit(f"{a.store}: the stored prompt has no 'Task ' ... 'Example task:' message")
    names = yaml.safe_load(open(f"{a.task_set}/set.yaml"))[a.split][: a.limit]
    tok = Tokenizer.from_file(f"{a.ckpt}/tokenizer.json")
    model = AutoModelForCausalLM.from_pretrained(a.ckpt, dtype=torch.float32).eval()
    stop = tok.token_to_id("<|im_end|>")
    out, counts = [], collections.Counter()
    for name in names:
        t = yaml.safe_load(open(f"{a.task_set}/{name}/task.yaml"))
        shape = lambda v: "[" + ", ".join(map(str, v["shape"])) + "]"
        io = "".join(f"input {k}: {v['dtype']} {shape(v)}\n" for k, v in t["inputs"].items())
        io += "".join(f"output {k}: {v['dtype']} {shape(v)}\n" for k, v in t["outputs"].items())
        sizes = ", ".join(f"{k} = {v}" for k, v in t["sizes"].items())
        msg = (f"Task {name}: write a CPU kernel that computes the same outputs as this PyTorch module.\n\n"
               f"{t['prompt']}\nsizes: {sizes}\n{io}\n")
        ids = tok.encode(tmpl[:start] + msg + tmpl[end:]).ids
        with torch.no_grad():
            gen = model.generate(torch.tensor([ids]), max_new_tokens=320, do_sample=False, eos_token_id=stop)
        answer = tok.decode(gen[0, len(ids):].tolist(), skip_special_tokens=True)
        solution = open(f"{a.task_set}/{name}/solutions/cpu_model.md").read()
        got, want = code_lines(answer), code_lines(solution)
        if got == want:
            counts["same as the solution"] += 1
        else:
            comments = lambda ls: [l.strip() for l in ls if l.strip().startswith("//")]
            kind = "C" if comments(got) != comments(want) else "L"
            counts["a comment differs" if kind == "C" else "only code lines differ"] += 1
            diffs = [(g.strip(), w.strip()) for g, w in zip(got, want) if g != w][:3]
            print(kind, name, t["source"]["program"], diffs)
        out.append({"name": name, "program": t["source"]["program"], "answer": answer, "solution": solution})
    print(dict(counts), "of", len(names))
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
