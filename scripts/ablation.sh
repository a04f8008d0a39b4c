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
# MODEL=smollm2 runs the same ablation on SmolLM2-135M-Instruct (configs/smollm2: its warm start
# and arms, sized for 2 cores; the model comes from `bash scripts/get-model.sh smollm2`, the warm
# start goes to models/smollm2-sft, the store to results/ablation-smollm2).
#
# Environment: MODEL (tiny | smollm2, default tiny), EVAL_AFTER (1: score each arm run's last
# checkpoint with `leap eval --run` on EVAL_SPLIT (default eval), at most EVAL_LIMIT tasks (0: all);
# MODEL=smollm2 sets it, with EVAL_LIMIT 60), SEEDS (default "0 1 2"), WARM_SEEDS (warm starts, default "0": seed w != 0 makes
# models/ewred_lines-sft-w<w> with `--set train.seed=w` and runs every arm x seed from it, so the
# spread covers the warm start too), ARMS (default all four), OUT (default results/ablation:
# the store OUT/leap.db, run folders, OUT/sft.db for the warm start), TARGET (eval Acc@1 for the
# time-to-target column, default 0.8), SET (extra `--set` arguments for every arm, e.g.
# "--set train.steps=4"), LEAP (default build/leap), JOBS (arm runs at a time, default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-"0 1 2"}
WARM_SEEDS=${WARM_SEEDS:-0}
ARMS=${ARMS:-"st_grpo mt_binary mt_rank mt_dcp_rank"}
MODEL=${MODEL:-tiny}
case "$MODEL" in
  tiny) CONFIGS=configs/generated; SFT=models/ewred_lines-sft; OUT=${OUT:-results/ablation} ;;
  smollm2) CONFIGS=configs/smollm2; SFT=models/smollm2-sft; OUT=${OUT:-results/ablation-smollm2}
           EVAL_AFTER=${EVAL_AFTER:-1}; EVAL_LIMIT=${EVAL_LIMIT:-60} ;;
  *) echo "ablation: unknown MODEL '$MODEL' (tiny | smollm2)" >&2; exit 2 ;;
esac
TARGET=${TARGET:-0.8}
SET=${SET:-}
LEAP=${LEAP:-build/leap}
TASKS=tasks/generated/ewred_lines
TINY=models/ewred_lines-tiny
NICE="nice -n 10"

[ -x "$LEAP" ] || $NICE bash scripts/build.sh
mkdir -p "$OUT"
start=$(date +%s)
if [ ! -f "$TASKS/set.yaml" ]; then
  $LEAP tasks generate ewred --count 2700 --seed 0 --eval-fraction 0.0740741 --spellings canonical --names numbered \
    --out "$TASKS"
fi
if [ "$MODEL" = tiny ] && [ ! -f "$TINY/config.json" ]; then
  $NICE $LEAP model init --preset tiny --pretokenizer lines --corpus "$TASKS" --out "$TINY" --seed 0
fi
[ "$MODEL" = smollm2 ] && bash scripts/get-model.sh smollm2
# The warm start of seed w: models/ewred_lines-sft (w = 0, as before) or models/ewred_lines-sft-w<w>.
sft_of() { if [ "$1" = 0 ]; then echo "$SFT"; else echo "$SFT-w$1"; fi; }
# The run files of arm x RL seed from warm start w: OUT/ARM-seedS (w = 0) or OUT/ARM-wW-seedS.
name_of() { if [ "$2" = 0 ]; then echo "$1-seed$3"; else echo "$1-w$2-seed$3"; fi; }
for w in $WARM_SEEDS; do
  sft=$(sft_of "$w")
  if [ ! -f "$sft/config.json" ]; then
    tag=$( [ "$w" = 0 ] && echo sft || echo "sft-w$w" )
    $NICE $LEAP --db "$OUT/sft.db" --results-dir "$OUT" train "$CONFIGS/sft.yaml" --set train.seed="$w" |
      tee "$OUT/$tag.txt"
    ckpt=$(awk '/^  checkpoint /{print $2}' "$OUT/$tag.txt" | tail -1)
    [ -f "$ckpt/config.json" ] || { echo "ablation: no checkpoint found after the warm start ($ckpt)" >&2; exit 1; }
    rm -rf "$sft.tmp" && cp -r "$ckpt" "$sft.tmp" && mv "$sft.tmp" "$sft"
  fi
done
echo "ablation: warm start ready after $(( $(date +%s) - start )) s"
# One arm x RL seed run from warm start w; its stdout goes to OUT/<name_of>.txt.
run_arm() {
  local arm=$1 seed=$2 w=$3 t0 name model=()
  t0=$(date +%s)
  name=$(name_of "$arm" "$w" "$seed")
  [ "$w" = 0 ] || model=(--set model.path="$(sft_of "$w")")
  # shellcheck disable=SC2086
  $NICE $LEAP --db "$OUT/leap.db" --results-dir "$OUT" train "$CONFIGS/$arm.yaml" \
    --set train.seed="$seed" "${model[@]}" $SET >"$OUT/$name.txt" 2>"$OUT/$name.log" ||
    { echo "ablation: $name failed (tail of $OUT/$name.log):" >&2; tail -5 "$OUT/$name.log" >&2; return 1; }
  echo "ablation: $name: run $(awk '/^run .* finished:/{print $2}' "$OUT/$name.txt" | tail -1)," \
    "$(( $(date +%s) - t0 )) s"
}
# JOBS runs at a time (default 1; with 2, set "--set model.cpu_threads=1" in SET so the two
# processes share the 2 cores instead of oversubscribing them); the store serialises their writes.
JOBS=${JOBS:-1}
failed=0
# Runs `"$@" ARM SEED W` for every warm start x RL seed x arm, JOBS at a time; failed=1 if one fails.
for_each_run() {
  local pids=() p w seed arm
  for w in $WARM_SEEDS; do
    for seed in $SEEDS; do
      for arm in $ARMS; do
        "$@" "$arm" "$seed" "$w" &
        pids+=($!)
        if [ "${#pids[@]}" -ge "$JOBS" ]; then wait "${pids[0]}" || failed=1; pids=("${pids[@]:1}"); fi
      done
    done
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
}
for_each_run run_arm
runs=()
for w in $WARM_SEEDS; do
  for seed in $SEEDS; do
    for arm in $ARMS; do
      id=$(awk '/^run .* finished:/{print $2}' "$OUT/$(name_of "$arm" "$w" "$seed").txt" | tail -1)
      [ -n "$id" ] && runs+=("$id")
    done
  done
done
ids=$(IFS=,; echo "${runs[*]}")
# EVAL_AFTER=1 (the SmolLM2 arms, which skip the in-run evaluations): each arm run's last
# checkpoint is scored on the held-out split with `leap eval --run`, into OUT/<name>.eval.txt.
eval_arm() {
  local arm=$1 seed=$2 w=$3 t0 name id
  name=$(name_of "$arm" "$w" "$seed")
  id=$(awk '/^run .* finished:/{print $2}' "$OUT/$name.txt" 2>/dev/null | tail -1)
  { [ -n "$id" ] && [ ! -s "$OUT/$name.eval.txt" ]; } || return 0  # not run, or evaluated before
  t0=$(date +%s)
  $NICE $LEAP --db "$OUT/leap.db" --results-dir "$OUT" eval --run "$id" --config "$CONFIGS/$arm.yaml" --bench "$TASKS" \
    --split "${EVAL_SPLIT:-eval}" --limit "${EVAL_LIMIT:-0}" >"$OUT/$name.eval.txt.tmp" 2>"$OUT/$name.eval.log" ||
    { echo "ablation: the evaluation of $name failed (tail of $OUT/$name.eval.log):" >&2; tail -5 "$OUT/$name.eval.log" >&2; return 1; }
  mv "$OUT/$name.eval.txt.tmp" "$OUT/$name.eval.txt"
  echo "ablation: $name evaluated in $(( $(date +%s) - t0 )) s ($OUT/$name.eval.txt)"
}
[ "${EVAL_AFTER:-0}" = 1 ] && for_each_run eval_arm
same=()
[ "$(echo $WARM_SEEDS | wc -w)" -gt 1 ] && same=(--same model.path)  # warm starts pool into each arm
$LEAP --db "$OUT/leap.db" report --runs "$ids" --target "$TARGET" --format md "${same[@]}" | tee "$OUT/report.md"
echo "ablation: ${#runs[@]} runs ($ids) in $(( $(date +%s) - start )) s; table in $OUT/report.md"
[ "$failed" = 0 ] || { echo "ablation: some arm runs failed; the table above has only the runs that finished" >&2; exit 1; }
