#!/bin/bash
# Device call 4 (issue #19, helper b), from the repository root of the worktree after `source .device/setup.sh`:
#   bash results/nvidia-h200/loop19/dev4.sh
# 1. the old kernel (before issue #19's loop changes, its tuned 128x256x16 / 2 stages) and the new one with three
#    configurations, side by side with cuBLAS at 2048^3, 4096^3, 8192^3 (results/nvidia-h200/loop19/ab19.py, 3 rounds);
# 2. the large- and medium-square configurations chosen from that (results/nvidia-h200/loop19/choose19.py -> grader/tuned_configs.json);
# 3. Nsight Compute at 4096^3 on the chosen build (as results/nvidia-h200/shapes_run.sh does);
# 4. the benchmark, every stage and shape (python3 -m grader.bench --budget 30).
export PYTHONPATH=$(pwd):$PYTHONPATH GRADER_BACKEND=gpu PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out19}; mkdir -p $OUT/bench
C=results/nvidia-h200/loop19/cubins
{
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
echo "== A/B"
AB_JSON=$OUT/ab4.json python3 results/nvidia-h200/loop19/ab19.py 3 2048,4096,8192 old=$C/base.cubin@BK=16,STAGES=2 new=$C/new.cubin:8:3 \
    cA=$C/cA.cubin@BK=8,STAGES=3,WM=32,WN=128,WNITER=4 cC=$C/cC.cubin@BK=8,STAGES=3,BM=256,BN=128
echo "== choice"
python3 results/nvidia-h200/loop19/choose19.py $OUT/ab4.json && cp grader/tuned_configs.json $OUT/
git diff --stat
echo "== ncu 4096x4096x4096"
timeout 150 ncu --clock-control none -k regex:gemm --launch-count 2 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
    --metrics smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
    -o /tmp/ncu-4096 python3 results/nvidia-h200/shapes_profile.py 4096x4096x4096 | grep -v "^==PROF== Profiling"
ncu -i /tmp/ncu-4096.ncu-rep --csv --page raw > $OUT/ncu-4096x4096x4096.csv
echo "== bench"
time python3 -m grader.bench --budget 30 --out $OUT/bench
} 2>&1 | tee $OUT/run.log
