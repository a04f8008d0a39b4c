#!/usr/bin/env python3
"""Build byte-level BPE tokenizer fixtures with HF `tokenizers` for leap's tokenizer parity test.

Usage: make_tokenizer_fixture.py OUT_DIR

Writes, for each variant, OUT_DIR/<variant>/tokenizer.json and OUT_DIR/<variant>/cases.json:
  qwen   NFC normalizer, Split(Qwen2 regex, Isolated) + ByteLevel(use_regex=false), merges as
         [a, b] pairs, special tokens <|endoftext|> <|im_start|> <|im_end|>, non-special <think>.
  llama  no normalizer, Split(Llama-3 regex) + ByteLevel, ignore_merges=true, merges as "a b"
         strings, TemplateProcessing adding <|begin_of_text|>, Llama-3 header tokens.
  gpt2   ByteLevel(add_prefix_space=true, use_regex=true) only.
cases.json: {"cases": [{"text", "ids", "decoded", "decoded_skip", "ids_special"?}, ...]}
Deterministic (fixed corpus and seeds). Needs: tokenizers.
"""
import json
import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CODE = [
    "def softmax(x):\n    m = x.max(dim=-1, keepdim=True).values\n    e = (x - m).exp()\n    return e / e.sum(-1, keepdim=True)\n",
    "__global__ void add(const float* __restrict__ a, const float* b, float* c, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) c[i] = a[i] + b[i];\n}\n",
    "#include <cuda_runtime.h>\n\ntemplate <typename T>\nstruct Vec4 { T x, y, z, w; };\n",
    "for (int k = 0; k < K; k += 32) {\r\n\tacc += A[row * K + k] * B[k * N + col];\r\n}\r\n",
    "    if x:\n        return 1\n\n\n    else:\n\t\treturn  2  \n",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC;",
    "x = [1, 2, 3]; y = {'a': 1, \"b\": 2}; z = x[::2] + [i**2 for i in range(10)]",
    "<div class=\"row\"><span>&nbsp;Hello&amp;bye</span></div>",
    "torch.empty((4096, 4096), dtype=torch.bfloat16, device='cuda')",
    "    // TODO(leap): fuse the epilogue\n    __syncthreads();\n",
]
PROSE = [
    "The quick brown fox jumps over the lazy dog. It's 3:45 PM, and we'll be there by 6.",
    "I'm sure they've done it; you'd know if they'd not. DON'T SHOUT! We'RE fine, aren't we?",
    "Numbers: 1234567890, 3.14159, -0.5e-10, 1,000,000 and 007.",
    "你好，世界！今天天气很好。我们一起去公园吧。",
    "日本語のテキストです。カタカナとひらがな、漢字。",
    "한국어 문장입니다. 안녕하세요!",
    "Emoji: 👍 👍🏽 👨‍👩‍👧‍👦 🇺🇸 😀😃😄 ✨🔥",
    "Café naïve résumé coöperate Ångström façade São Paulo Zürich",
    "Привет, мир! Как дела? Ελληνικά κείμενα. עברית. العربية.",
    "Tabs\tand  double  spaces   and\n\nnewlines\r\nand CRLF\r\n\r\n",
]


def corpus():
    rng = random.Random(1234)
    lines = []
    for _ in range(60):
        lines.extend(CODE)
        lines.extend(PROSE)
    words = "kernel tile warp block thread shared memory reduce matmul softmax layernorm gelu".split()
    for _ in range(3000):
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))))
    return lines


def hard_strings():
    s = []
    s += CODE + PROSE
    s += ["", " ", "  ", "\n", "\n\n", "\t", "\t\t", "\r\n", "\r\n\r\n", "\r", " \n", "\n ", "   \n  \n",
          "a", "A", "0", "00", "000", "0000", "12345", "１２３", "٣٤٥", "Ⅻ", "½", "x²", "1st 2nd 3rd",
          "I'm", "don't", "DON'T", "we'll", "they'RE", "it's", "It’s", "'s", "'", "''", "'''",
          "you've", "I'd", "she'll'd", "O'Reilly", "rock'n'roll",
          "e\u0301", "cafe\u0301", "A\u030a", "\u212b", "\u1100\u1161\u11a8", "\uac01", "\ufb01",
          "\u0041\u0308\u0301", "o\u0308\u0304", "\u0958", "\u2126", "Å", "e\u0301\u0301",
          "\u00a0", "a\u00a0b", "\u3000", "a\u3000b", "\u2028", "\u2029", "\x85", "a\x85b", "\u200b", "\u200d",
          "\x0b\x0c", "\u001c", "\u001f", "a\x00b", "\x00", "\u2003\u2003x", "\ufeffBOM",
          "<|im_start|>", "<|im_end|>", "<|endoftext|>", "hello<|im_start|>world", "<|im_end|><|im_end|>",
          "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|im_start", "<|im_start|",
          "< |im_start|>", "<<|im_start|>>", "<|im_start|><|im_start|>", " <|im_end|> ",
          "text<|endoftext|>more text", "<think>reasoning</think>answer", "<think> </think>",
          "<think>\n\n</think>\n\n", "<thinking>", "<|begin_of_text|>hi", "<|eot_id|>",
          "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
          " " * 17, " " * 300, "\n" * 40, "\t " * 20, "a" * 1000, "ab" * 500, "1" * 200,
          "word " * 200, "!!!???...", "---===+++", "``` python\nprint('x')\n```",
          "http://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32",
          "$x^2 + y^2 = z^2$", "∑_{i=1}^{n} i = n(n+1)/2", "→ ← ↑ ↓ ⇒", "€100 £50 ¥1000 ₹20",
          "👍", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸🇯🇵", "🏳️‍🌈", "😀" * 10, "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𠀀𠀁", "\U0010ffff", "\ue000",
          "ﷺ", "ﬀ", "Ⓐ", "ǅ", "ß", "ẞ", "İstanbul", "ΣΑΣ", "ǈ", "Ǉ",
          "  leading", "trailing  ", "  both  ", " \t mixed \t ", "x\n\n\ny", "x \n y", "x  \n  y",
          ]
    long_text = "\n".join(CODE + PROSE) * 5
    s.append(long_text)
    rng = random.Random(42)
    pool = list("abcXYZ019 \t\n\r'\"_-.,;:!?()[]{}<>|/\\@#$%^&*+=~`") + \
        ["é", "e\u0301", "ñ", "ü", "你", "好", "の", "한", "👍", "🏽", "\u200d", "\u00a0", "\u3000", "’",
         "<|im_start|>", "<|im_end|>", "<think>", "Ω", "\u0301", "ß", "ﬁ", "１", "٣"]
    while len(s) < 320:
        s.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 60))))
    return s


def build(variant):
    tok = Tokenizer(models.BPE())
    if variant == "qwen":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    elif variant == "llama":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                    "<|eot_id|>"]
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
        specials = ["<|endoftext|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    if variant == "qwen":
        tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                        AddedToken("</think>", special=False, normalized=False)])
    if variant == "llama":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    data = json.loads(tok.to_str())
    if variant == "llama":
        data["model"]["ignore_merges"] = True
        data["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return Tokenizer.from_str(json.dumps(data)), data


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    strings = hard_strings()
    for variant in ("qwen", "llama", "gpt2"):
        tok, data = build(variant)
        d = os.path.join(out, variant)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # references from the file as written
        cases = []
        for text in strings:
            ids = tok.encode(text, add_special_tokens=False).ids
            case = {"text": text, "ids": ids,
                    "decoded": tok.decode(ids, skip_special_tokens=False),
                    "decoded_skip": tok.decode(ids, skip_special_tokens=True)}
            if variant == "llama":
                case["ids_special"] = tok.encode(text, add_special_tokens=True).ids
            cases.append(case)
        with open(os.path.join(d, "cases.json"), "w", encoding="utf-8") as f:
            json.dump({"variant": variant, "cases": cases}, f, ensure_ascii=True)
    print(f"wrote {len(strings)} cases x 3 variants to {out}")


if __name__ == "__main__":
    main()
