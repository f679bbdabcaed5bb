#!/usr/bin/env bash
# What a partition over MPI ranks costs: `tpusim bench psum -p 8 -b 64M -e 64M` (or the
# arguments given) on 1, 2 and 4 ranks in one run, each table as `tpusim bench` prints
# it (on ranks with the bytes that crossed ranks per iteration and each rank's busy
# share of the run). Needs Open MPI (Debian: openmpi-bin libopenmpi-dev libclang-dev);
# builds tpusim with `--features mpi`. BACKEND=cpu|gpu (default cpu), RANKS="1 2 4".
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --features mpi --bin tpusim >&2
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
  args=(psum -p 8 -b 64M -e 64M)
fi
for r in ${RANKS:-1 2 4}; do
  echo "## $r rank(s): mpirun -np $r tpusim bench ${args[*]} --backend ${BACKEND:-cpu}"
  mpirun --allow-run-as-root --oversubscribe -np "$r" target/release/tpusim bench "${args[@]}" \
    --backend "${BACKEND:-cpu}" 2>/dev/null
done
