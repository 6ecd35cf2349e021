#!/bin/bash
# Device call 1 (issue #19, helper b): variants timed against cuBLAS, then ncu source-level stalls of two builds.
# From the repository root: source .device/setup.sh && cd .wt19 && bash results/nvidia-h200/loop19/dev1.sh
export PYTHONPATH=$(pwd):$PYTHONPATH GRADER_BACKEND=gpu PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out19}; mkdir -p $OUT
C=results/nvidia-h200/loop19/cubins
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
python3 results/nvidia-h200/loop19/ab19.py 2 2048,4096,8192 dev=DEV base=$C/base.cubin lean=$C/lean.cubin lp=$C/lp.cubin \
    lpp=$C/lpp.cubin par=$C/par.cubin lpp8=$C/lpp8.cubin:8:3 lpp3=$C/lpp3.cubin:16:3 2>&1 | tee $OUT/ab1.log
for v in base lpp; do
  timeout 120 ncu --clock-control none -k regex:sgemm --launch-count 1 --section WarpStateStats --section SourceCounters \
      --section SpeedOfLight --metrics sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active \
      -o /tmp/ncu_$v python3 results/nvidia-h200/loop19/prof19.py $C/$v.cubin 4096 > /tmp/ncu_$v.log 2>&1; tail -3 /tmp/ncu_$v.log
  ncu -i /tmp/ncu_$v.ncu-rep --page source --csv --print-source sass > $OUT/src_$v.csv 2> $OUT/src_$v.err || \
    ncu -i /tmp/ncu_$v.ncu-rep --page source --csv > $OUT/src_$v.csv 2>> $OUT/src_$v.err
  ncu -i /tmp/ncu_$v.ncu-rep --page raw --csv > $OUT/raw_$v.csv 2>/dev/null
  wc -c $OUT/src_$v.csv; head -c 600 $OUT/src_$v.err
done
