#!/bin/bash
# Device call 2 (issue #19, helper b): more variants (cubins from results/nvidia-h200/loop19/build.sh) against cuBLAS, 3 rounds.
export PYTHONPATH=$(pwd):$PYTHONPATH GRADER_BACKEND=gpu PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out19}; mkdir -p $OUT
C=results/nvidia-h200/loop19/cubins
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
python3 results/nvidia-h200/loop19/ab19.py 3 2048,4096,8192 base=$C/base.cubin par=$C/par.cubin lp=$C/lp.cubin lpar=$C/lpar.cubin \
    f3=$C/f3.cubin lpp8=$C/lpp8.cubin:8:3 lpar8=$C/lpar8.cubin:8:3 lp8=$C/lp8.cubin:8:3 par8=$C/par8.cubin:8:3 \
    lppo8=$C/lppo8.cubin:8:3 f3_8=$C/f3_8.cubin:8:3 f3n=$C/f3n.cubin f3n_8=$C/f3n_8.cubin:8:3 2>&1 | tee $OUT/ab2.log
