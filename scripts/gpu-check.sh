#!/usr/bin/env bash
# GPU check of the cuda backend, in one command on a machine with an NVIDIA GPU and the image's own
# PyTorch: builds leap against that PyTorch, runs the cuda tests (the GPU ones run for real there),
# then `leap eval` of every starter cuda solution, and prints a summary (with the device each
# reference was timed on: cuda:N on a GPU). A preflight (under 15 s) stops first, naming the
# missing piece, when the machine lacks what the check needs. The build is its own call (its limit
# is BUILD_LIMIT_S); the check stages' limits are in STAGE_LIMITS below and sum to at most 400 s, so
# each of the two fits one 10-minute device call (the build folder is kept between calls).
#
#   bash scripts/gpu-bundle.sh          # HERE: builds and strips the programs into .gpu-bundle/
#   scripts/gpu-check.sh                # THERE, one call (carry [".gpu-bundle"]): preflight, the
#                                       # bundle checked, the stages; global deadline DEADLINE_S
#   scripts/gpu-check.sh --dry-run      # the plan: stages, limits, deadline, files written to $OUT
# Without a bundle that starts there, it builds there (two calls, as before):
#   scripts/gpu-check.sh --fetch-debs   # HERE (a Debian machine with apt): puts the -dev packages
#                                       # the GPU image lacks into .gpu-debs/ (git-ignored)
#   scripts/gpu-check.sh --build        # THERE, call 1: preflight + build (carry [".gpu-debs"])
#   scripts/gpu-check.sh                # THERE, call 2: preflight + build (a no-op now) + the stages
# $OUT receives two files: summary.txt (the summary table) and gpu-check-logs.tgz (every log).
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

# Every time limit of the check, in seconds, in one place (the stages sum to at most 400 s).
BUILD_LIMIT_S=420
declare -A STAGE_LIMITS=([preflight]=15 [sdpa]=15 [tests]=75 [eval]=45 [twice]=40 [model]=70 [update]=35 [optimizer]=10 [train]=70 [smollm2]=25)
LIMIT_SUM=0; for k in "${!STAGE_LIMITS[@]}"; do LIMIT_SUM=$((LIMIT_SUM + STAGE_LIMITS[$k])); done
if [ "${1:-}" = "--limits" ]; then
  for k in preflight sdpa tests eval twice model update optimizer train smollm2; do echo "$k ${STAGE_LIMITS[$k]}"; done; echo "sum $LIMIT_SUM"; exit 0
fi
[ "$LIMIT_SUM" -le 400 ] || { echo "gpu-check: stage limits sum to $LIMIT_SUM s, over 400 s"; exit 2; }
# The whole run ends by DEADLINE_S: a watchdog stops the stage in flight, then the summary is written.
DEADLINE_S=480
if [ "${1:-}" = "--dry-run" ]; then
  echo "gpu-check plan (deadline ${DEADLINE_S} s; with a bundle no build, else the build is a call of its own, limit ${BUILD_LIMIT_S} s):"
  echo "  machine, preflight (limit ${STAGE_LIMITS[preflight]} s), bundle check (leap version from .gpu-bundle)"
  for k in sdpa tests eval twice model update optimizer train smollm2; do printf '  %-10s limit %3s s\n' "$k" "${STAGE_LIMITS[$k]}"; done
  echo "  stage limits sum to $LIMIT_SUM s"
  echo "  files written to \$OUT: summary.txt, gpu-check-logs.tgz (2 of the 8 that come back)"
  exit 0
fi
BUILD_ONLY=0; [ "${1:-}" = "--build" ] && BUILD_ONLY=1

START=$(date +%s)
# Logs stay on the machine and travel back as one archive (at most 8 files come back from $OUT).
LOG=/tmp/gpu-check-logs
rm -rf "$LOG"; mkdir -p "$LOG"
declare -A STATUS
stage() { echo; echo "==== $1 ($(($(date +%s) - START)) s)"; }
elapsed() { echo $(($(date +%s) - START)); }
# Peak device memory over a stage: nvidia-smi sampled every 100 ms in the background while the
# stage's process runs (read after it exits, the memory is already freed). MiB, the whole GPU.
peak_start() { PEAK_FILE=$LOG/peak-$1.txt; : >"$PEAK_FILE"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$PEAK_FILE" 2>/dev/null & PEAK_PID=$!; }
peak_stop() { kill "$PEAK_PID" 2>/dev/null; wait "$PEAK_PID" 2>/dev/null
  sort -n "$PEAK_FILE" | awk 'NF { m = $1 } END { if (m != "") print "peak device memory " m " MiB (nvidia-smi, sampled every 100 ms)"; else print "peak device memory: not sampled" }'; }

# Writes the summary (also to $OUT/summary.txt) and the logs' archive; called at the end or at the deadline.
SUMMARY_KEYS="image build sdpa tests eval reference twice model update optimizer train smollm2"
write_summary() {
  {
    echo; echo "==== summary ($(elapsed) s)"
    printf '%-9s %s\n' "limits" "$(for k in preflight sdpa tests eval twice model update optimizer train smollm2; do printf '%s %ss, ' "$k" "${STAGE_LIMITS[$k]}"; done)sum ${LIMIT_SUM}s"
    for k in $SUMMARY_KEYS; do printf '%-9s %s\n' "$k" "${STATUS[$k]:-not run}"; done
    echo "total $(elapsed) s"
  } | tee "$LOG/summary.txt"
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    cp "$LOG/summary.txt" "$OUT/summary.txt"
    tar czf "$OUT/gpu-check-logs.tgz" -C "$(dirname "$LOG")" "$(basename "$LOG")" 2>/dev/null
  fi
}
on_deadline() { echo; echo "gpu-check: the ${DEADLINE_S} s deadline was reached: stopping"; write_summary; exit 4; }
trap on_deadline TERM
( sleep "$DEADLINE_S"; pkill -TERM -P $$ 2>/dev/null; kill -TERM $$ 2>/dev/null ) &
WATCHDOG=$!
trap 'pkill -P "$WATCHDOG" 2>/dev/null; kill "$WATCHDOG" 2>/dev/null' EXIT

stage "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi: not available"
nproc

# 0. Preflight: what the check needs, named when missing (well under STAGE_LIMITS[preflight]).
stage "preflight"
PY=${LEAP_GPU_PYTHON:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3 || true)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
missing=()
BUNDLE=$ROOT/.gpu-bundle
if [ ! -x "$BUNDLE/bin/leap" ]; then
  command -v cmake >/dev/null || missing+=("cmake (the build; or carry a bundle: bash scripts/gpu-bundle.sh here)")
  command -v ninja >/dev/null || missing+=("ninja (the build; or carry a bundle)")
fi
[ -f "$CUDA_HOME/include/cuda.h" ] || missing+=("the CUDA toolkit headers ($CUDA_HOME/include/cuda.h)")
# (one existing path is enough: `ls A B` fails when either is missing)
any_exists() { for f in "$@"; do [ -e "$f" ] && return 0; done; return 1; }
any_exists "$CUDA_HOME"/lib64/libnvrtc.so* "$CUDA_HOME"/targets/*/lib/libnvrtc.so* ||
  missing+=("NVRTC ($CUDA_HOME/lib64/libnvrtc.so): without it the cuda backend is compiled out and the GPU tests would run nothing")
ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' || any_exists /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 ||
  missing+=("the NVIDIA driver (libcuda.so.1): no GPU here")
# A cold `import torch` (and CUDA's start-up) can take tens of seconds on a fresh machine.
if [ -z "$PY" ] || ! timeout 40 "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)" >/dev/null 2>&1; then
  missing+=("PyTorch with a usable GPU (LEAP_GPU_PYTHON=${PY:-none}: import torch; torch.cuda.is_available())")
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "gpu-check: preflight failed after $(elapsed) s; missing:"
  for m in "${missing[@]}"; do echo "  - $m"; done
  exit 3
fi
echo "preflight ok ($(elapsed) s)"
STATUS[image]=$("$PY" -c "
import torch
p = torch.cuda.get_device_properties(0)
nccl = '.'.join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, 'nccl') else '?'
print('torch %s, CUDA %s, cuDNN %s, NCCL %s, %s, %d SMs, %.0f GiB' % (torch.__version__, torch.version.cuda,
      torch.backends.cudnn.version(), nccl, p.name, p.multi_processor_count, p.total_memory / 2**30))" 2>&1 | tail -1)
echo "image: ${STATUS[image]}"

# 0b. Which SDPA kernel the image's PyTorch picks for the attention shapes leap runs (Qwen2.5-1.5B:
# 12 query heads, 2 key/value heads, head 128; bf16): the decode step (grouped heads as query
# positions, with and without a key mask), a padded prefill (K/V repeated to 12 heads, bool
# mask), an unpadded causal prefill with enable_gqa, and a training forward with gradients.
stage "sdpa kernels"
STATUS[sdpa]=$(timeout "${STAGE_LIMITS[sdpa]}" "$PY" - <<'PY' 2>&1 | tee "$LOG/sdpa.log" | tail -1
import time, torch
import torch.nn.functional as F
import torch.nn.attention as attn
names = {int(getattr(attn.SDPBackend, n)): n for n in dir(attn.SDPBackend) if n.isupper()}
dev, bf = "cuda", torch.bfloat16
def case(label, q, k, v, mask=None, causal=False, gqa=False, grad=False):
    try:
        choice = torch._fused_sdp_choice(q, k, v, mask, 0.0, causal, scale=None, enable_gqa=gqa)
        kind = names.get(int(choice), str(choice))
        for t in (q, k, v):
            t.requires_grad_(grad)
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(5):
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)
            if grad:
                o.sum().backward()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / 5 * 1e3
        print("%-44s %-20s %8.3f ms" % (label, kind, ms)); return "%s=%s" % (label.split()[0], kind)
    except Exception as e:
        print("%-44s FAILED %s" % (label, str(e).splitlines()[0][:120])); return "%s=FAILED" % label.split()[0]
r = lambda *s: torch.randn(*s, device=dev, dtype=bf)
B, S = 64, 2048
mask1 = torch.ones(B, 1, 1, S, dtype=torch.bool, device=dev); mask1[:, :, :, :100] = False
out = [case("decode-grouped-masked [64,2,6,128] x 2048", r(B, 2, 6, 128), r(B, 2, S, 128), r(B, 2, S, 128), mask1),
       case("decode-grouped [64,2,6,128] x 2048", r(B, 2, 6, 128), r(B, 2, S, 128), r(B, 2, S, 128))]
T = 512
maskp = torch.ones(8, 1, T, T, dtype=torch.bool, device=dev).tril(); maskp[0, :, :, :50] = False
out.append(case("prefill-padded [8,12,512,128] (K/V repeated)", r(8, 12, T, 128), r(8, 12, T, 128), r(8, 12, T, 128), maskp))
out.append(case("prefill-causal [8,12,512,128] gqa", r(8, 12, T, 128), r(8, 2, T, 128), r(8, 2, T, 128), causal=True, gqa=True))
out.append(case("train-padded [8,12,512,128] backward", r(8, 12, T, 128), r(8, 12, T, 128), r(8, 12, T, 128), maskp, grad=True))
print(", ".join(out))
PY
)
echo "sdpa: ${STATUS[sdpa]}"

# 1a. The bundle built here (scripts/gpu-bundle.sh) against the image's LibTorch: no build when it starts.
USE_BUNDLE=0
JOBS=$(nproc)
if [ -x "$BUNDLE/bin/leap" ]; then
  stage "bundle"
  cat "$BUNDLE/MANIFEST"
  TORCH_LIB=$("$PY" -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
  export LD_LIBRARY_PATH=$BUNDLE/lib:$TORCH_LIB:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LEAP_PYTHON=$PY LEAP_TOOLS_DIR=$ROOT/tools
  # The programs read fixtures and tools under the source folder they were built in.
  SRC_DIR=$(awk '$1 == "source_dir" { print $2 }' "$BUNDLE/MANIFEST")
  if [ -n "$SRC_DIR" ] && [ "$SRC_DIR" != "$ROOT" ] && [ ! -e "$SRC_DIR" ]; then
    mkdir -p "$(dirname "$SRC_DIR")" && ln -s "$ROOT" "$SRC_DIR" && echo "linked $SRC_DIR -> $ROOT"
  fi
  if "$BUNDLE/bin/leap" version; then
    USE_BUNDLE=1
    BUILD=$BUNDLE/bin
    STATUS[build]="bundle ($(awk '$1 == "commit" { print substr($2, 1, 12) }' "$BUNDLE/MANIFEST")), no build"
  else
    echo "the bundle does not start here: building instead"
  fi
fi

# 1. Build dependencies: unpack the carried Debian packages into a private prefix (never into /).
[ "$USE_BUNDLE" = 1 ] || {
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
  # Multiarch headers (OpenSSL's opensslconf.h, ...) are on no include path after dpkg -x.
  export CPATH=$DEPS/usr/include:$DEPS/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}
  command -v pkg-config >/dev/null || ln -sf "$DEPS/usr/bin/pkgconf" "$DEPS/usr/bin/pkg-config"
  echo "unpacked $(ls "$DEBS"/*.deb | wc -l) packages into $DEPS"
else
  echo "no .gpu-debs/*.deb: using the system's packages"
fi

# 2. Build against the image's own PyTorch.
stage "build"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available())"
BUILD=${LEAP_GPU_BUILD:-build-gpu}
if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLEAP_PYTHON="$PY" -DLEAP_CUDA_HOME="$CUDA_HOME" \
     -DCMAKE_POLICY_VERSION_MINIMUM=3.5 >"$LOG/configure.log" 2>&1 &&
   timeout "$BUILD_LIMIT_S" ninja -C "$BUILD" -j"$JOBS" leap leap-worker leap_tests bench_generate bench_update bench_optimizer >"$LOG/build.log" 2>&1; then
  STATUS[build]="ok ($(elapsed) s)"
else
  STATUS[build]="FAILED"
  tail -40 "$LOG/configure.log"
  grep -E "error|Error" -m 30 "$LOG/build.log"
  tail -20 "$LOG/build.log"
fi
}

if [ "$BUILD_ONLY" = 1 ]; then echo "build: ${STATUS[build]}"; [ "${STATUS[build]}" != "FAILED" ]; exit $?; fi

if [ "${STATUS[build]}" != "FAILED" ]; then
  stage "leap version"
  "$BUILD/leap" version

  # 3. The cuda tests (on a GPU none of them may print LEAP-SKIP, except the no-GPU one).
  stage "cuda tests"
  if timeout "${STAGE_LIMITS[tests]}" "$BUILD/leap_tests" -tc='*cuda*' 2>&1 | tee "$LOG/tests.log"; then
    STATUS[tests]="ok"
  else
    STATUS[tests]="FAILED"
  fi
  SKIPS=$(grep -c "LEAP-SKIP" "$LOG/tests.log" || true)
  STATUS[tests]="${STATUS[tests]}, $SKIPS skip marker(s) ($(elapsed) s)"

  # 4. Every starter cuda solution through the verifier on the GPU.
  stage "leap eval --backend cuda"
  timeout "${STAGE_LIMITS[eval]}" "$BUILD/leap" --db /tmp/leap-gpu-check.sqlite eval --tasks tasks/starter --solutions tasks/starter \
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

  # 4b. The same answer timed twice (two evaluations of one solution): the ratio of its two
  # candidate times and of its two speedups says how repeatable one measurement is.
  stage "the same answer timed twice"
  TWICE=$LOG/twice
  rm -rf "$TWICE"; mkdir -p "$TWICE/sol/softmax_rows"
  cp tasks/starter/softmax_rows/solutions/cuda_*.md "$TWICE/sol/softmax_rows/" 2>/dev/null
  for i in 1 2; do
    timeout $((STAGE_LIMITS[twice] / 2)) "$BUILD/leap" --db "$TWICE/db.sqlite" eval --tasks tasks/starter --solutions "$TWICE/sol" \
      --backend cuda --format json --set env.workers=1 >"$TWICE/run$i.json" 2>>"$TWICE/err.log"
  done
  STATUS[twice]=$("$PY" - "$TWICE/run1.json" "$TWICE/run2.json" <<'PY'
import json, sys
try:
    a, b = (json.load(open(p))["results"] for p in sys.argv[1:3])
    ra = [r for r in a if r["verdict"] == "correct"]; rb = [r for r in b if r["verdict"] == "correct"]
    c = ra[0]["candidate_ms"] / rb[0]["candidate_ms"]; s = ra[0]["speedup"] / rb[0]["speedup"]
    print("candidate ms ratio %.3f, speedup ratio %.3f (%s)" % (c, s, ra[0]["file"].split("/")[-1]))
except Exception as e:
    print("FAILED: %s" % e)
PY
)
  echo "${STATUS[twice]}"

  # 4c. Generation at Qwen2.5-1.5B shapes in bf16 (random weights; tokens/s and peak memory).
  stage "generation at Qwen2.5-1.5B shapes, bf16"
  M15=/tmp/leap-gpu-qwen15
  if [ -x "$BUILD/bench_generate" ]; then
    [ -f "$M15/model.safetensors" ] || timeout $((STAGE_LIMITS[model] / 3)) "$BUILD/leap" model init --preset qwen2.5-1.5b-shape --out "$M15" >"$LOG/init15.log" 2>&1
    peak_start generate
    # Eager dynamic decode (finished rows dropped) against static shapes replayed from CUDA graphs,
    # alternating, on the fused bf16 weights a rollout copy holds; the share of the bandwidth bound
    # at 4.3 TB/s (the H200's measured copy bandwidth, issue 48).
    timeout $((STAGE_LIMITS[model] * 2 / 3)) "$BUILD/bench_generate" "$M15" --device cuda --dtype bf16 --fuse 1 \
      --batch 1,16,64,256 --ragged-batch 64 --new-tokens 128 --prompt-len 512 --compare dynamic,graph --pairs 2 --bandwidth-gbs 4300 \
      >"$LOG/generate.log" 2>&1
    rc=$?
    PEAK=$(peak_stop)
    cat "$LOG/generate.log" | tail -6
    echo "$PEAK"
    STATUS[model]="rc $rc: $(grep -c '^compare' "$LOG/generate.log" 2>/dev/null || echo 0) batch sizes measured; $PEAK"
  else
    STATUS[model]="not built"
  fi

  # 4d. The update at Qwen2.5-1.5B shapes in bf16 autocast with layer checkpointing: prompt
  # sharing against without, on quickstart-shaped samples (bench_update alternates the sides).
  stage "update at Qwen2.5-1.5B shapes, bf16, shared vs unshared prompts"
  if [ -x "$BUILD/bench_update" ]; then
    peak_start update
    timeout "${STAGE_LIMITS[update]}" "$BUILD/bench_update" --preset qwen2.5-1.5b --device cuda --dtype bf16 \
      --checkpointing 1 --pairs 3 >"$LOG/update.log" 2>&1
    rc=$?
    PEAK=$(peak_stop)
    tail -5 "$LOG/update.log"
    echo "$PEAK"
    STATUS[update]="rc $rc: $(grep -o 'median [0-9.]* (min [0-9.]*, max [0-9.]*)' "$LOG/update.log" | head -1 || echo 'no ratio'); $PEAK"
  else
    STATUS[update]="not built"
  fi

  # 4e. One AdamW step, torch::optim::AdamW against rl::FusedAdamW, at SmolLM2-135M's shapes
  # (float32 master weights; bench_optimizer alternates the sides).
  stage "optimizer step: unfused vs fused AdamW"
  if [ -x "$BUILD/bench_optimizer" ]; then
    timeout "${STAGE_LIMITS[optimizer]}" "$BUILD/bench_optimizer" --device cuda --pairs 5 >"$LOG/optimizer.log" 2>&1
    rc=$?
    tail -4 "$LOG/optimizer.log"
    STATUS[optimizer]="rc $rc: $(grep -o 'median [0-9.]* (min [0-9.]*, max [0-9.]*)' "$LOG/optimizer.log" | head -1 || echo 'no ratio')"
  else
    STATUS[optimizer]="not built"
  fi

  # 5. A GPU policy and the cuda backend in one process (exec-started, sandboxed workers): two RL
  # steps of the tiny model after a short SFT on the starter cuda solutions; at least one answer
  # must have run on the GPU (correct or wrong_output), not every one failing to start.
  stage "leap train: model.device cuda + env.backend cuda"
  TDB=/tmp/leap-gpu-train.sqlite
  rm -f "$TDB"
  [ -f /tmp/leap-gpu-tiny/model.safetensors ] || "$BUILD/leap" model init --preset tiny --out /tmp/leap-gpu-tiny >"$LOG/init.log" 2>&1
  timeout "${STAGE_LIMITS[train]}" "$BUILD/leap" --db "$TDB" --results-dir /tmp/leap-gpu-results train configs/quickstart.yaml \
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

  # 6. A real pretrained model on the GPU: two RL steps of SmolLM2-135M-Instruct (no SFT) on the
  # starter tasks, cpu backend, when its folder is there (scripts/get-model.sh smollm2; 513 MiB in
  # fp32, so it cannot be carried to a lent machine whose carry limit is 64 MiB: copy it there).
  SMOL=${LEAP_SMOLLM2_DIR:-models/smollm2-135m-instruct}
  if [ -f "$SMOL/model.safetensors" ]; then
    stage "leap train: SmolLM2-135M-Instruct on cuda, 2 steps"
    SDB=/tmp/leap-gpu-smollm2.sqlite
    rm -f "$SDB"
    timeout "${STAGE_LIMITS[smollm2]}" "$BUILD/leap" --db "$SDB" --results-dir /tmp/leap-gpu-results train configs/quickstart.yaml \
      --set name=smollm2-gpu --set model.path="$SMOL" --set model.device=cuda --set train.steps=2 --set train.sft.enabled=false \
      --set train.checkpoint_every=0 --set train.eval_every=0 --set rollout.max_new_tokens=256 >"$LOG/smollm2.log" 2>&1
    rc=$?
    tail -8 "$LOG/smollm2.log"
    STATUS[smollm2]="rc $rc ($(elapsed) s)"
  else
    STATUS[smollm2]="skipped: no $SMOL (bash scripts/get-model.sh smollm2)"
  fi
fi

pkill -P "$WATCHDOG" 2>/dev/null; kill "$WATCHDOG" 2>/dev/null
trap - TERM
write_summary
[ "${STATUS[build]}" != "FAILED" ] && [[ "${STATUS[tests]}" == ok* ]] && [ "${STATUS[eval]%% *}" = "rc" ] && [[ "${STATUS[eval]}" == "rc 0"* ]] &&
  [[ "${STATUS[train]}" == "rc 0, "[1-9]* ]]
