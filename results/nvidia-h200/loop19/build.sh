#!/bin/bash
# NVDISASM: nvdisasm of CUDA 13 (pip install nvidia-cuda-nvdisasm: it lands in site-packages/nvidia/cu13/bin/)
NVDISASM=${NVDISASM:-nvdisasm}
# build.sh SRC OUTNAME [extra nvcc flags]: cubin as PyCUDA builds it (extern "C" wrap), SASS via nvdisasm
src=$1; out=$2; shift 2
D="-DBM=128 -DBN=256 -DBK=16 -DWM=64 -DWN=64 -DWNITER=2 -DTM=8 -DTN=4 -DNUM_THREADS=256 -DSTAGES=2 -DMIN_BLOCKS=1"
{ echo 'extern "C" {'; cat $src; echo '}'; } > /tmp/b19_$out.cu
nvcc --cubin -arch sm_90 $D "$@" -o /tmp/b19_$out.cubin /tmp/b19_$out.cu -Xptxas -v 2>&1 | grep -i "registers\|error\|spill" 
$NVDISASM -c -hex /tmp/b19_$out.cubin > /tmp/b19_$out.sass 2>&1 || $NVDISASM -c /tmp/b19_$out.cubin > /tmp/b19_$out.sass
wc -l /tmp/b19_$out.sass
