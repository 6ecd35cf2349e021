# The device run behind results/nvidia-h200/shapes.md (from the repository root, on the H200):
#   source .device/setup.sh && bash results/nvidia-h200/shapes_run.sh
# Writes into $OUT (or ./shapes-out): autotune.json, tuned_configs.json, bench/, run.log, ncu-*.csv.
set -o pipefail
OUT=${OUT:-shapes-out}
mkdir -p "$OUT"
export GRADER_BACKEND=gpu PYTHONUNBUFFERED=1 PYTHONPATH=$(pwd):$PYTHONPATH   # this checkout's grader
{
  echo "== autotune, every shape class"
  python3 -m grader.autotune --out "$OUT/autotune.json" --jobs "$(nproc)" | tr '\r' '\n' | grep -v '^\['
  cp grader/tuned_configs.json "$OUT/"
  echo "== split-K code cost at gridDim.z = 1"
  python3 results/nvidia-h200/shapes_ab.py 4096 8192 2048
  echo "== bench"
  python3 -m grader.bench --budget 30 --out "$OUT/bench"
  for shape in 4096x4096x4096 512x512x8192; do
    echo "== ncu $shape"
    ncu --clock-control none -k regex:gemm --launch-count 2 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
        --metrics smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
        -o /tmp/ncu-$shape python3 results/nvidia-h200/shapes_profile.py $shape
    ncu -i /tmp/ncu-$shape.ncu-rep --csv --page raw > "$OUT/ncu-$shape.csv"
  done
} 2>&1 | tee "$OUT/run.log"
