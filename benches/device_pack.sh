#!/usr/bin/env bash
# Builds what benches/device.sh runs and copies it into one folder (default .dev, ignored by
# git) for a machine without cargo: the tpusim binary, each bench as bench-NAME, and the
# Python extension that `maturin develop` last built into python/tpusim/, if any. Carry that
# folder to the machine and run benches/device.sh there.
#   benches/device_pack.sh [FOLDER]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.dev}
mkdir -p "$dir"
cargo build --release --bins
cp target/release/tpusim "$dir/tpusim"
# The newest executable of each bench target, as cargo prints it.
cargo bench --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["kind"] == ["bench"] and m.get("executable"):
        shutil.copy(m["executable"], sys.argv[1] + "/bench-" + m["target"]["name"])
        print("bench-" + m["target"]["name"])
' "$dir"
cp python/tpusim/_native*.so "$dir/" 2>/dev/null || echo "no Python extension in python/tpusim/: the suite will be skipped"
ls -l "$dir"
