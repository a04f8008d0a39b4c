#!/usr/bin/env bash
# Configures and builds leap (Release with line tables) into build/. Incremental; ccache when present.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${LEAP_BUILD_DIR:-build}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DLEAP_PYTHON="$PWD/.venv/bin/python" >"$BUILD_DIR.configure.log" 2>&1 ||
    { cat "$BUILD_DIR.configure.log"; exit 1; }
fi
set +e
ninja -C "$BUILD_DIR" ${LEAP_BUILD_TARGETS:-leap leap_tests} 2>&1 | grep --line-buffered -vE '^\[[0-9]+/[0-9]+\] (Building|Linking|Precompiling|Generating)'
rc=${PIPESTATUS[0]}
exit "$rc"
