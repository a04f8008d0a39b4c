#!/usr/bin/env bash
# GPU check of the cuda backend, in one command on a machine with an NVIDIA GPU and the image's own
# PyTorch: builds leap against that PyTorch, runs the cuda tests (the GPU ones run for real there),
# then `leap eval` of every starter cuda solution, and prints a summary (with the device each
# reference was timed on: cuda:N on a GPU). Sized for a 10-minute call.
#
#   scripts/gpu-check.sh --fetch-debs   # HERE (a Debian machine with apt): puts the -dev packages
#                                       # the GPU image lacks into .gpu-debs/ (git-ignored)
#   scripts/gpu-check.sh                # THERE, with .gpu-debs carried (device tool: carry [".gpu-debs"])
#
# Environment: LEAP_GPU_PYTHON (default: /opt/torch/.venv/bin/python, else python3) supplies torch;
# LEAP_GPU_BUILD (default build-gpu) is the build folder; OUT (if set) receives the logs.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEBS=$ROOT/.gpu-debs
PKGS="libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 doctest-dev
      libsqlite3-dev libsqlite3-0 nlohmann-json3-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
      libpcre2-posix3 libutf8proc-dev libutf8proc2 libseccomp-dev libseccomp2 libssl-dev libssl3 pkgconf pkgconf-bin libpkgconf3"

if [ "${1:-}" = "--fetch-debs" ]; then
  mkdir -p "$DEBS"
  (cd "$DEBS" && apt-get download $PKGS) || exit 1
  ls -la "$DEBS"
  du -sh "$DEBS"
  exit 0
fi

START=$(date +%s)
LOG=${OUT:-/tmp}/gpu-check
mkdir -p "$LOG"
declare -A STATUS
stage() { echo; echo "==== $1 ($(($(date +%s) - START)) s)"; }
elapsed() { echo $(($(date +%s) - START)); }

stage "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi: not available"
nproc

# 1. Build dependencies: unpack the carried Debian packages into a private prefix (never into /).
stage "dependencies"
DEPS=/tmp/leap-deps
if ls "$DEBS"/*.deb >/dev/null 2>&1; then
  mkdir -p "$DEPS"
  for f in "$DEBS"/*.deb; do dpkg -x "$f" "$DEPS"; done
  # pkg-config files name prefix=/usr; point them at the private prefix.
  find "$DEPS" -name '*.pc' -exec sed -i "s|^prefix=/usr|prefix=$DEPS/usr|" {} +
  export CMAKE_PREFIX_PATH=$DEPS/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export PKG_CONFIG_PATH=$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig:$DEPS/usr/share/pkgconfig
  export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PATH=$DEPS/usr/bin:$PATH
  command -v pkg-config >/dev/null || ln -sf "$DEPS/usr/bin/pkgconf" "$DEPS/usr/bin/pkg-config"
  echo "unpacked $(ls "$DEBS"/*.deb | wc -l) packages into $DEPS"
else
  echo "no .gpu-debs/*.deb: using the system's packages"
fi

# 2. Build against the image's own PyTorch.
stage "build"
PY=${LEAP_GPU_PYTHON:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available())"
BUILD=${LEAP_GPU_BUILD:-build-gpu}
JOBS=$(nproc)
if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLEAP_PYTHON="$PY" >"$LOG/configure.log" 2>&1 &&
   timeout 330 ninja -C "$BUILD" -j"$JOBS" leap leap_tests >"$LOG/build.log" 2>&1; then
  STATUS[build]="ok ($(elapsed) s)"
else
  STATUS[build]="FAILED"
  tail -40 "$LOG/configure.log"
  grep -E "error|Error" -m 30 "$LOG/build.log"
  tail -20 "$LOG/build.log"
fi

if [ "${STATUS[build]}" != "FAILED" ]; then
  stage "leap version"
  "$BUILD/leap" version

  # 3. The cuda tests (on a GPU none of them may print LEAP-SKIP, except the no-GPU one).
  stage "cuda tests"
  if timeout 120 "$BUILD/leap_tests" -tc='*cuda*' 2>&1 | tee "$LOG/tests.log"; then
    STATUS[tests]="ok"
  else
    STATUS[tests]="FAILED"
  fi
  SKIPS=$(grep -c "LEAP-SKIP" "$LOG/tests.log" || true)
  STATUS[tests]="${STATUS[tests]}, $SKIPS skip marker(s) ($(elapsed) s)"

  # 4. Every starter cuda solution through the verifier on the GPU.
  stage "leap eval --backend cuda"
  timeout 200 "$BUILD/leap" --db /tmp/leap-gpu-check.sqlite eval --tasks tasks/starter --solutions tasks/starter \
    --backend cuda --format json --set env.seeds=3 --set env.workers=4 --set env.timing.trials=10 --set env.timing.max_seconds=1 \
    --set env.cpu.threads="$JOBS" --set env.run_timeout_s=30 >"$LOG/eval.json" 2>"$LOG/eval.err"
  rc=$?
  tail -5 "$LOG/eval.err"
  STATUS[eval]="rc $rc ($(elapsed) s)"
  rm -f "$LOG/refdev.txt"
  "$PY" - "$LOG/eval.json" "$LOG/refdev.txt" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("no eval output:", e); sys.exit(0)
devices = {}
print("%-22s %-32s %-14s %9s %10s %10s %s" % ("task", "file", "verdict", "speedup", "cand_ms", "ref_ms", "ref_device"))
for r in d["results"]:
    sp = "-" if r["speedup"] is None else "%.2fx" % r["speedup"]
    cm = "-" if r["candidate_ms"] is None else "%.4f" % r["candidate_ms"]
    rm = "-" if r["reference_ms"] is None else "%.4f" % r["reference_ms"]
    dev = r.get("reference_device") or "-"
    if r["verdict"] == "correct":
        devices[dev] = devices.get(dev, 0) + 1
    print("%-22s %-32s %-14s %9s %10s %10s %s" % (r["task"], r["file"].split("/")[-1], r["verdict"], sp, cm, rm, dev))
    if r["verdict"] != "correct":
        print("    " + r["feedback"].replace("\n", "\n    ")[:1200])
print("counts:", d["counts"])
# On a GPU every correct result's reference must have been timed there too (not on the CPU).
line = ", ".join("%s: %d" % kv for kv in sorted(devices.items())) or "none"
print("reference timed on:", line, "(expected: every correct result on cuda:N)")
open(sys.argv[2], "w").write(line + "\n")
PY
  STATUS[reference]="timed on $(cat "$LOG/refdev.txt" 2>/dev/null || echo '?')"

  # 5. A GPU policy and the cuda backend in one process (exec-started, sandboxed workers): two RL
  # steps of the tiny model after a short SFT on the starter cuda solutions; at least one answer
  # must have run on the GPU (correct or wrong_output), not every one failing to start.
  stage "leap train: model.device cuda + env.backend cuda"
  TDB=/tmp/leap-gpu-train.sqlite
  rm -f "$TDB"
  [ -f /tmp/leap-gpu-tiny/model.safetensors ] || "$BUILD/leap" model init --preset tiny --out /tmp/leap-gpu-tiny >"$LOG/init.log" 2>&1
  timeout 240 "$BUILD/leap" --db "$TDB" --results-dir /tmp/leap-gpu-results train configs/quickstart.yaml \
    --set model.path=/tmp/leap-gpu-tiny --set model.device=cuda --set env.backend=cuda --set train.steps=2 \
    --set train.checkpoint_every=0 --set train.eval_every=0 --set train.sft.steps=60 --set env.run_timeout_s=30 \
    >"$LOG/train.log" 2>&1
  rc=$?
  tail -15 "$LOG/train.log"
  "$PY" - "$TDB" "$LOG/train-verdicts.txt" <<'PY'
import sqlite3, sys
try:
    db = sqlite3.connect(sys.argv[1])
    rows = db.execute("SELECT verdict, COUNT(*) FROM turns GROUP BY verdict ORDER BY 2 DESC").fetchall()
    dev = db.execute("SELECT message FROM events WHERE kind = 'device'").fetchall()
    sft = db.execute("SELECT message FROM events WHERE kind = 'sft'").fetchall()
except Exception as e:
    rows, dev, sft = [], [], []
    print("no store:", e)
print("turn verdicts:", rows)
print("device event:", dev[:1])
print("sft event:", [m[0][:600] for m in sft[:1]])
ran = sum(n for v, n in rows if v in ("correct", "wrong_output", "inputs_modified"))
ran += sum(m[0].count("wrong_output") for m in sft)
open(sys.argv[2], "w").write("%d answers ran on the GPU (correct/wrong_output); verdicts %s\n" % (ran, rows))
PY
  STATUS[train]="rc $rc, $(cat "$LOG/train-verdicts.txt" 2>/dev/null || echo '?') ($(elapsed) s)"
fi

stage "summary"
for k in build tests eval reference train; do printf '%-9s %s\n' "$k" "${STATUS[$k]:-not run}"; done
echo "total $(elapsed) s"
[ "${STATUS[build]}" != "FAILED" ] && [[ "${STATUS[tests]}" == ok* ]] && [ "${STATUS[eval]%% *}" = "rc" ] && [[ "${STATUS[eval]}" == "rc 0"* ]] &&
  [[ "${STATUS[train]}" == "rc 0, "[1-9]* ]]
