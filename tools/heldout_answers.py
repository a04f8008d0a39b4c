#!/usr/bin/env python3
"""Saved answers of a model on a generated task set, compared line by line with each task's shipped
solution (docs/results.md, 2026-12-03: what the warm start gets wrong).

Usage:
  leap eval --bench TASK_SET --split eval --model CKPT --samples 1 --turns 1 \\
      --config configs/generated/st_grpo.yaml --save-answers ANSWERS
  python tools/heldout_answers.py ANSWERS TASK_SET [--turn 1] [--json OUT]

ANSWERS is the folder `leap eval --save-answers` wrote (<task>/s<sample>_t<turn>.md), so the answers
are exactly the ones leap sampled and graded (with eval.temperature 0 they are the greedy ones).

Prints one line per answer that is not the solution: 'C' if a comment line differs (the prompt's
PyTorch line was not copied), 'L' if only code lines differ; then the counts, and how many of the
operator comments and of the return comments equal the solution's at the same place.
"""
import argparse, collections, json, os, re, sys

import yaml


def code_lines(text):
    m = re.search(r"```cpp\n(.*?)```", text, re.S)
    return m.group(1).splitlines() if m else []


def comments(lines):
    return [l.strip() for l in lines if l.strip().startswith("//")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("answers"), ap.add_argument("task_set")
    ap.add_argument("--turn", type=int, default=1), ap.add_argument("--json", default=None)
    a = ap.parse_args()
    files = sorted((task, f) for task in os.listdir(a.answers) if os.path.isdir(os.path.join(a.answers, task))
                   for f in os.listdir(os.path.join(a.answers, task)) if f.endswith(f"_t{a.turn}.md"))
    if not files:
        sys.exit(f"{a.answers}: no <task>/s<sample>_t{a.turn}.md answer (a `leap eval --save-answers` folder?)")
    out, counts, right = [], collections.Counter(), collections.Counter()
    for task, f in files:
        answer = open(os.path.join(a.answers, task, f)).read()
        solution = open(os.path.join(a.task_set, task, "solutions", "cpu_model.md")).read()
        program = yaml.safe_load(open(os.path.join(a.task_set, task, "task.yaml")))["source"]["program"]
        got, want = code_lines(answer), code_lines(solution)
        gc, wc = comments(got), comments(want)
        g_ops = [c for c in gc if not c.startswith("// return")]
        w_ops = [c for c in wc if not c.startswith("// return")]
        g_ret = [c for c in gc if c.startswith("// return")]
        w_ret = [c for c in wc if c.startswith("// return")]
        right["operator comments"] += sum(g == w for g, w in zip(g_ops, w_ops))
        right["operator comments (of)"] += len(w_ops)
        right["return comments"] += int(g_ret[:1] == w_ret[:1] and bool(w_ret))
        right["return comments (of)"] += len(w_ret[:1])
        right["same number of comment lines"] += len(gc) == len(wc)
        if got == want:
            counts["same as the solution"] += 1
        else:
            kind = "C" if gc != wc else "L"
            counts["a comment differs" if kind == "C" else "only code lines differ"] += 1
            diffs = [(g.strip(), w.strip()) for g, w in zip(got, want) if g != w][:3]
            print(kind, task, f, program, diffs)
        out.append({"task": task, "file": f, "program": program, "answer": answer, "solution": solution})
    print(dict(counts), "of", len(files), "answers")
    print(f"operator comments right: {right['operator comments']} of {right['operator comments (of)']}; "
          f"return comments right: {right['return comments']} of {right['return comments (of)']}; "
          f"answers with the solution's number of comment lines: {right['same number of comment lines']}")
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
