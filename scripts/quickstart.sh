#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, create the tiny model (once),
# then run `leap train configs/quickstart.yaml` (SFT warm start, then GRPO with DCP, the rank
# reward and compaction on the starter tasks, cpu backend). Extra arguments go to `leap train`,
# e.g. --set train.steps=2.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
if [ ! -f models/tiny/model.safetensors ]; then
  ./build/leap model init --preset tiny --out models/tiny
fi
exec ./build/leap train configs/quickstart.yaml "$@"
