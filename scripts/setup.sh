#!/usr/bin/env bash
# Installs everything leap needs on a Debian 12 machine: system packages and the project's
# Python virtualenv with the pinned torch wheel (LibTorch for the C++ build). Idempotent, and
# quiet when everything is already there. Run as root (or with sudo available).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(g++ cmake ninja-build ccache pkg-config git python3 python3-venv
  libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev doctest-dev libsqlite3-dev sqlite3
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev libseccomp-dev libssl-dev gnuplot-nox
  chromium  # the report's browser test (tests/test_report_browser.cpp) opens the HTML report headless
  libgloo-dev)  # headers only: c10d's ProcessGroupGloo.hpp needs them (src/dist, docs/distributed.md)

say() { echo "[setup] $*"; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  say "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The virtualenv (~5 GB with torch's CUDA libraries) lives in a per-user cache keyed by the
# requirements file, and .venv links to it, so every clone (CI clones afresh) shares one copy.
# A real .venv folder made by hand is used as it is (the requirements are still installed in it).
REQ=tools/requirements.txt
PY=${LEAP_BASE_PYTHON:-python3}
key=$( (cat "$REQ"; "$PY" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-12)
if [ -d .venv ] && [ ! -L .venv ]; then
  venv=$PWD/.venv
else
  cache=${LEAP_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leap}
  venv="$cache/venv-$key"
  if [ ! -x "$venv/bin/python" ]; then
    say "creating the Python virtualenv $venv"
    mkdir -p "$cache"
    "$PY" -m venv "$venv"
  fi
  ln -sfn "$venv" .venv
fi
if [ ! -f "$venv/.requirements-$key" ]; then
  say "installing Python packages into $venv (torch 2.11.0: a few minutes the first time)"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$REQ"
  "$venv/bin/python" -c "import torch; assert torch.__version__.startswith('2.11.0'), torch.__version__"
  touch "$venv/.requirements-$key"
fi
# The tools' own packages (tensorboard, ...): into the same virtualenv, once per version of the file.
TOOLS_REQ=tools/requirements-tools.txt
tools_key=$(sha256sum "$TOOLS_REQ" | cut -c1-12)
if [ ! -f "$venv/.tools-requirements-$tools_key" ]; then
  say "installing the tools' Python packages into $venv ($TOOLS_REQ)"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$TOOLS_REQ"
  touch "$venv/.tools-requirements-$tools_key"
fi
