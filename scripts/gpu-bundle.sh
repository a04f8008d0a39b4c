#!/usr/bin/env bash
# Builds the GPU bundle HERE, so a lent GPU machine spends no time building (issue 42, A5):
# leap, leap-worker, leap_tests, leap_dist_update_worker and the benches, built against this
# machine's torch 2.11.0+cu130 wheel (the GPU image runs the same LibTorch), stripped, with the
# Debian runtime libraries they need that are neither the C/C++ runtime nor LibTorch's nor CUDA's.
#
#   bash scripts/gpu-bundle.sh       # writes .gpu-bundle/ (git-ignored): bin/, lib/, MANIFEST
#
# On the GPU machine, scripts/gpu-check.sh finds .gpu-bundle/ (carry it: run's carry
# [".gpu-bundle"]) and runs it against the image's LibTorch (/opt/torch/.venv) through
# LD_LIBRARY_PATH; only if `leap version` does not start from it does it build there.
# Checks here: the bundle is under 50 MiB and `leap version` starts from it with an environment
# holding only the bundle's lib/ and the venv's torch/lib on the library path.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUTDIR=$ROOT/.gpu-bundle
BUILD_DIR=${LEAP_BUILD_DIR:-build}
TARGETS="leap leap-worker leap_tests leap_dist_update_worker bench_generate bench_update bench_optimizer"
LIMIT_MIB=50

# 1. Build (incremental; the RelWithDebInfo build is -O2, stripping removes its line tables).
LEAP_BUILD_TARGETS="$TARGETS" bash scripts/build.sh >/dev/null
TORCH_LIB=$("$ROOT/.venv/bin/python" -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")

# 2. Binaries, stripped.
rm -rf "$OUTDIR.tmp"
mkdir -p "$OUTDIR.tmp/bin" "$OUTDIR.tmp/lib"
for t in $TARGETS; do strip -o "$OUTDIR.tmp/bin/$t" "$BUILD_DIR/$t"; done

# 3. The libraries they need from Debian packages: what ldd resolves outside LibTorch's folder,
# CUDA's and the C/C++ runtime (the image's own, newer, are used there).
skip='^(libc|libm|libdl|librt|libpthread|libutil|libresolv|libanl|libnsl|libstdc\+\+|libgcc_s|ld-linux-x86-64|linux-vdso|libcuda|libnvrtc|libnvrtc-builtins)\.so'
for t in $TARGETS; do
  ldd "$OUTDIR.tmp/bin/$t" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  case "$path" in "$TORCH_LIB"/*|/usr/local/cuda*) continue ;; esac
  cp -L "$path" "$OUTDIR.tmp/lib/$name"
done

# 4. What the bundle is, for the device script.
{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- src tests bench CMakeLists.txt cmake || echo ' (with uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
  echo "source_dir $ROOT"
  echo "torch $("$ROOT/.venv/bin/python" -c 'import torch; print(torch.__version__)')"
  echo "libs $(ls "$OUTDIR.tmp/lib" | tr '\n' ' ')"
} >"$OUTDIR.tmp/MANIFEST"
rm -rf "$OUTDIR"
mv "$OUTDIR.tmp" "$OUTDIR"

# 5. Checks: size, and `leap version` from the bundle with only its libraries and torch's.
size_kib=$(du -sk "$OUTDIR" | cut -f1)
if [ "$size_kib" -gt $((LIMIT_MIB * 1024)) ]; then
  echo "gpu-bundle: $OUTDIR is $((size_kib / 1024)) MiB, over $LIMIT_MIB MiB" >&2
  exit 1
fi
if ! env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$OUTDIR/lib:$TORCH_LIB" "$OUTDIR/bin/leap" version >"$OUTDIR.version.log" 2>&1; then
  echo "gpu-bundle: leap version does not start from the bundle:" >&2
  cat "$OUTDIR.version.log" >&2
  exit 1
fi
echo "gpu-bundle: $OUTDIR, $((size_kib / 1024)) MiB: $(ls "$OUTDIR/bin" | wc -l) programs, $(ls "$OUTDIR/lib" | wc -l) libraries"
head -1 "$OUTDIR.version.log"
rm -f "$OUTDIR.version.log"
