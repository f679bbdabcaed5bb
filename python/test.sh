#!/usr/bin/env bash
# Builds the Python package with maturin into a virtual environment (python/.venv, made
# and filled from requirements-dev.txt when missing) and runs its tests with pytest.
# The Rust crate builds in the repository's target directory. Part of the README's
# test command: `cargo test --release && python/test.sh`.
set -euo pipefail
cd "$(dirname "$0")"
venv="${TPUSIM_VENV:-$PWD/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import maturin, numpy, pytest, ml_dtypes" 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
fi
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cd .. && pwd)/target}"
start=$(date +%s)
maturin develop --release --quiet
echo "python/test.sh: built the extension in $(( $(date +%s) - start )) s"
python -m pytest -q tests "$@"
