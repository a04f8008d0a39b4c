#!/usr/bin/env bash
# Builds bench_generate and compares leap's batched sampling with transformers' generate().
# CPU:  scripts/bench-generate.sh [--pairs 5] [--batch 1,16,64]
# GPU:  scripts/bench-generate.sh --preset qwen2.5-1.5b --device cuda --dtype bf16
set -euo pipefail
cd "$(dirname "$0")/.."
ninja -C build bench_generate
exec .venv/bin/python tools/bench_generate.py "$@"
