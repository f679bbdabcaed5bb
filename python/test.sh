#!/usr/bin/env bash
# Builds the Python package with maturin into a virtual environment (python/.venv, made
# and filled from requirements-dev.txt when missing) and runs its tests with pytest.
# The package needs Python 3.12 or 3.13 (jax 0.11+ needs 3.12): the first of
# $TPUSIM_PYTHON, python3.13, python3.12, python3 (and pyenv's 3.13 and 3.12) that is
# one makes the venv. The Rust crate builds in the repository's target directory.
# Part of the README's test command: `cargo test --release --features mpi && python/test.sh`.
set -euo pipefail
cd "$(dirname "$0")"
venv="${TPUSIM_VENV:-$PWD/.venv}"

supported() {  # is $1 a Python 3.12 or 3.13 with venv?
  "$@" -c 'import sys, venv, ensurepip; sys.exit(not ((3, 12) <= sys.version_info[:2] <= (3, 13)))' 2>/dev/null
}

find_python() {
  local c v
  for c in ${TPUSIM_PYTHON:-} python3.13 python3.12 python3; do
    if command -v "$c" >/dev/null 2>&1 && supported "$c"; then echo "$c"; return; fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.1[23]\.' | sort -rV); do
      c="$(pyenv root)/versions/$v/bin/python3"
      if [ -x "$c" ] && supported "$c"; then echo "$c"; return; fi
    done
  fi
}

if [ ! -x "$venv/bin/python" ] || ! supported "$venv/bin/python"; then
  py="$(find_python)"
  if [ -z "$py" ]; then
    echo "python/test.sh: tpusim needs Python 3.12 or 3.13 with venv (jax 0.11+ needs 3.12);" \
         "found none (set TPUSIM_PYTHON to one)" >&2
    exit 2
  fi
  if [ -e "$venv" ]; then
    if [ -n "${TPUSIM_VENV:-}" ]; then  # the user's own: never removed
      echo "python/test.sh: TPUSIM_VENV=$venv is not a Python 3.12 or 3.13 venv" >&2
      exit 2
    fi
    rm -rf "$venv"  # this script's own python/.venv, made by an older Python
  fi
  "$py" -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import maturin, numpy, pytest, ml_dtypes, jax" 2>/dev/null \
    || [ ! -x "$venv/bin/ruff" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
fi
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cd .. && pwd)/target}"
# The package's style: ruff's lint and format (python/pyproject.toml) before the build.
ruff check --quiet . && ruff format --check --quiet .
start=$(date +%s)
maturin develop --release --quiet
echo "python/test.sh: built the extension in $(( $(date +%s) - start )) s"
python -m pytest -q tests "$@"
