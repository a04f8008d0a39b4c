#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh
bash scripts/build.sh
# The real pretrained checkpoint of tests/model_real_test.cpp (skipped when it cannot be fetched).
bash scripts/get-model.sh smollm2 || echo "[test] no SmolLM2 checkpoint: tests/model_real_test.cpp will be skipped"
cd "${LEAP_BUILD_DIR:-build}"
ctest --output-on-failure -j 2 --timeout 600
echo "[test] total $(( $(date +%s) - start )) s"
