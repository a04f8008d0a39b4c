#!/usr/bin/env bash
# The generated-family ablation (docs/results.md), one command:
#   1. generates the task set (tasks/generated/ewred_lines: 2700 distinct programs, 200 held out,
#      one PyTorch spelling per operator, numbered names),
#   2. makes the tiny model with a line tokenizer trained on that set's train split
#      (models/ewred_lines-tiny),
#   3. runs the supervised warm start once (configs/generated/sft.yaml) and copies its checkpoint
#      to models/ewred_lines-sft, the starting policy of every arm,
#   4. runs every arm (configs/generated/{st_grpo,mt_binary,mt_rank,mt_dcp_rank}.yaml) once per seed,
#   5. prints `leap report` over the arm runs (mean ± standard error over seeds per arm).
# Steps already done are skipped (delete models/ewred_lines-sft to redo the warm start). Every heavy
# command runs under `nice -n 10`.
#
# Environment: SEEDS (default "0 1 2"), ARMS (default all four), OUT (default results/ablation:
# the store OUT/leap.db, run folders, OUT/sft.db for the warm start), TARGET (eval Acc@1 for the
# time-to-target column, default 0.8), SET (extra `--set` arguments for every arm, e.g.
# "--set train.steps=4"), LEAP (default build/leap), JOBS (arm runs at a time, default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-"0 1 2"}
ARMS=${ARMS:-"st_grpo mt_binary mt_rank mt_dcp_rank"}
OUT=${OUT:-results/ablation}
TARGET=${TARGET:-0.8}
SET=${SET:-}
LEAP=${LEAP:-build/leap}
TASKS=tasks/generated/ewred_lines
TINY=models/ewred_lines-tiny
SFT=models/ewred_lines-sft
NICE="nice -n 10"

[ -x "$LEAP" ] || $NICE bash scripts/build.sh
mkdir -p "$OUT"
start=$(date +%s)
if [ ! -f "$TASKS/set.yaml" ]; then
  $LEAP tasks generate ewred --count 2700 --seed 0 --eval-fraction 0.0740741 --spellings canonical --names numbered \
    --out "$TASKS"
fi
if [ ! -f "$TINY/config.json" ]; then
  $NICE $LEAP model init --preset tiny --pretokenizer lines --corpus "$TASKS" --out "$TINY" --seed 0
fi
if [ ! -f "$SFT/config.json" ]; then
  $NICE $LEAP --db "$OUT/sft.db" --results-dir "$OUT" train configs/generated/sft.yaml | tee "$OUT/sft.txt"
  ckpt=$(awk '/^  checkpoint /{print $2}' "$OUT/sft.txt" | tail -1)
  [ -f "$ckpt/config.json" ] || { echo "ablation: no checkpoint found after the warm start ($ckpt)" >&2; exit 1; }
  rm -rf "$SFT.tmp" && cp -r "$ckpt" "$SFT.tmp" && mv "$SFT.tmp" "$SFT"
fi
echo "ablation: warm start ready after $(( $(date +%s) - start )) s"
# One arm x seed run; its stdout goes to OUT/ARM-seedS.txt.
run_arm() {
  local arm=$1 seed=$2 t0
  t0=$(date +%s)
  # shellcheck disable=SC2086
  $NICE $LEAP --db "$OUT/leap.db" --results-dir "$OUT" train "configs/generated/$arm.yaml" \
    --set train.seed="$seed" $SET >"$OUT/$arm-seed$seed.txt" 2>"$OUT/$arm-seed$seed.log" ||
    { echo "ablation: $arm seed $seed failed (tail of $OUT/$arm-seed$seed.log):" >&2; tail -5 "$OUT/$arm-seed$seed.log" >&2; return 1; }
  echo "ablation: $arm seed $seed: run $(awk '/^run .* finished:/{print $2}' "$OUT/$arm-seed$seed.txt" | tail -1)," \
    "$(( $(date +%s) - t0 )) s"
}
# JOBS runs at a time (default 1; with 2, set "--set model.cpu_threads=1" in SET so the two
# processes share the 2 cores instead of oversubscribing them); the store serialises their writes.
JOBS=${JOBS:-1}
pids=()
failed=0
for seed in $SEEDS; do
  for arm in $ARMS; do
    run_arm "$arm" "$seed" &
    pids+=($!)
    if [ "${#pids[@]}" -ge "$JOBS" ]; then wait "${pids[0]}" || failed=1; pids=("${pids[@]:1}"); fi
  done
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
runs=()
for seed in $SEEDS; do
  for arm in $ARMS; do
    id=$(awk '/^run .* finished:/{print $2}' "$OUT/$arm-seed$seed.txt" | tail -1)
    [ -n "$id" ] && runs+=("$id")
  done
done
ids=$(IFS=,; echo "${runs[*]}")
$LEAP --db "$OUT/leap.db" report --runs "$ids" --target "$TARGET" --format md | tee "$OUT/report.md"
echo "ablation: ${#runs[@]} runs ($ids) in $(( $(date +%s) - start )) s; table in $OUT/report.md"
[ "$failed" = 0 ] || { echo "ablation: some arm runs failed; the table above has only the runs that finished" >&2; exit 1; }
