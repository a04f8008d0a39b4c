"""Renders conversations with a chat template the way transformers' apply_chat_template does
(transformers.utils.chat_template_utils.render_jinja_template), for leap's chat-template parity test.

Usage: render_chat_template.py TEMPLATE CASES OUT
  TEMPLATE  a Jinja chat template file
  CASES     JSON: {"bos_token": "...", "cases": [{"messages": [{"role", "content"}], "add_generation_prompt": bool}]}
  OUT       JSON list of the rendered strings, one per case
"""
import json
import sys

from transformers.utils.chat_template_utils import render_jinja_template


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    template = open(sys.argv[1], encoding="utf-8").read()
    spec = json.load(open(sys.argv[2], encoding="utf-8"))
    out = []
    for case in spec["cases"]:
        rendered, _ = render_jinja_template(
            [case["messages"]],
            chat_template=template,
            add_generation_prompt=case["add_generation_prompt"],
            bos_token=spec.get("bos_token", ""),
        )
        out.append(rendered[0])
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
