#!/usr/bin/env bash
# Every GPU number tpusim reports, on whatever adapter is present (WGPU_BACKEND /
# WGPU_ADAPTER_NAME select one): builds, then runs the GPU bench (with the 256 MiB
# runs), the matmul bench, the per-op vs program comparison, bench sweeps up to GiB sizes, the P=256 run
# and the planner and checker benches. Writes everything to one result file.
#   benches/device.sh [RESULT_FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-device-bench-$(date -u +%Y%m%dT%H%M%SZ).txt}
cargo build --release --bins --benches
tpusim=./target/release/tpusim
{
  echo "# tpusim device benchmarks, $(date -u), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  "$tpusim" info
  echo; echo "## cargo bench --bench floors"; cargo bench -q --bench floors
  echo; echo "## cargo bench --bench matmul (1024 and 4096)"
  cargo bench -q --bench matmul
  TPUSIM_MATMUL_N=4096 cargo bench -q --bench matmul
  echo; echo "## cargo bench --bench gpu (TPUSIM_BENCH_LARGE=1)"
  TPUSIM_BENCH_LARGE=1 cargo bench -q --bench gpu
  for p in 4 8; do
    for program in auto off; do
      echo; echo "## tpusim bench all -p $p, TPUSIM_GPU_PROGRAM=$program"
      TPUSIM_GPU_PROGRAM=$program "$tpusim" bench all -p "$p" -b 4K -e 1G -f 16 -n 5 -w 1 -c 1
    done
  done
  echo; echo "## tpusim run psum -p 256 --shape 8x128"
  for program in auto off; do
    TPUSIM_GPU_PROGRAM=$program "$tpusim" run psum -p 256 --shape 8x128
  done
  echo; echo "## cargo bench --bench scheduler"; cargo bench -q --bench scheduler
  echo; echo "## cargo bench --bench checker"; cargo bench -q --bench checker
} 2>&1 | tee "$out"
echo "results in $out"
