#!/usr/bin/env bash
# Every GPU number tpusim reports, on whatever adapter is present (WGPU_BACKEND /
# WGPU_ADAPTER_NAME select one): builds, then runs the GPU bench (with the 256 MiB
# runs), the matmul bench, the per-op vs program comparison, bench sweeps up to GiB sizes, the P=256 run,
# the planner and checker benches, each op fused and unfused on the GPU (benches/ops.rs), and the kernel
# suite through JAX (python/bench/suite.py, tpusim-gpu against XLA on the host) when python/.venv
# holds the package (the device machine reaches no package index: carry the venv). Writes
# everything to one result file. On a machine without cargo it runs the binaries that
# benches/device_pack.sh built and copied into $TPUSIM_PREBUILT (default .dev); with them the
# Python extension, run from python/ on PYTHONPATH.
#   benches/device.sh [RESULT_FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-device-bench-$(date -u +%Y%m%dT%H%M%SZ).txt}
prebuilt=${TPUSIM_PREBUILT:-.dev}
if command -v cargo >/dev/null; then
  cargo build --release --bins --benches
  tpusim=./target/release/tpusim
  bench() { cargo bench -q --bench "$1"; }
  python=python/.venv/bin/python
else
  tpusim=$prebuilt/tpusim
  bench() { "$prebuilt/bench-$1"; }
  python=python3
  for so in "$prebuilt"/_native*.so; do [ -e "$so" ] && cp "$so" python/tpusim/; done
  export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
fi
{
  echo "# tpusim device benchmarks, $(date -u), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  "$tpusim" info
  echo; echo "## cargo bench --bench floors"; bench floors
  echo; echo "## cargo bench --bench matmul (1024 and 4096)"
  bench matmul
  TPUSIM_MATMUL_N=4096 bench matmul
  echo; echo "## cargo bench --bench gpu (TPUSIM_BENCH_LARGE=1)"
  TPUSIM_BENCH_LARGE=1 bench gpu
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
  echo; echo "## cargo bench --bench scheduler"; bench scheduler
  echo; echo "## cargo bench --bench checker"; bench checker
  for dtype in f32 bf16; do
    for n in 1024 4096; do
      echo; echo "## cargo bench --bench ops on the GPU, ${n}x${n} $dtype (fused regions / one dispatch per op)"
      TPUSIM_OPS_EXEC=gpu TPUSIM_OPS_N=$n TPUSIM_OPS_DTYPE=$dtype TPUSIM_OPS_ITERS=10 bench ops
    done
  done
  if "$python" -c "import tpusim" 2>/dev/null; then
    echo; echo "## python/bench/suite.py, tpusim-gpu against XLA (small, 16M; P = 4, 8)"
    "$python" python/bench/suite.py --sizes small,16M -p 4,8 --modes xla,tpusim-gpu,tpusim-cpu --markdown
  else
    echo; echo "## python/bench/suite.py skipped: no importable tpusim"
  fi
} 2>&1 | tee "$out"
echo "results in $out"
