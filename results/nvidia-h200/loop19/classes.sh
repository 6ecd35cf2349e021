#!/bin/bash
# Screen every tuned class's build: SASS metrics of the vec main loop, current source vs a new one.
NVDISASM=${NVDISASM:-nvdisasm}
NEW=${1:-wt_f3.cu}
while read cls defs; do
  for src in ../solutions/warptiling.cu $NEW; do
    n=cls_$(basename $src .cu)_$cls
    { echo 'extern "C" {'; cat $src; echo '}'; } > /tmp/b19_$n.cu
    r=$(nvcc --cubin -arch sm_90 $defs -o /tmp/b19_$n.cubin /tmp/b19_$n.cu -Xptxas -v 2>&1 | grep -o "Used [0-9]* registers\|[0-9]* bytes spill stores" | tr '\n' ' ')
    $NVDISASM -c -hex /tmp/b19_$n.cubin > /tmp/b19_$n.sass
    python3 -c "
import sass, io, contextlib
with contextlib.redirect_stdout(io.StringIO()): b = sass.main('/tmp/b19_$n.sass')
d = sass.lds_distance(b)
print('%-40s' % '$n', '$r', len(b), 'instr; stall', sum(x['stall'] for x in b), '; LDS<16', sum(x<16 for x in d), '<32', sum(x<32 for x in d), '; conflicts', sass.banks(b,2)[2])"
  done
done <<'CL'
small -DBM=64 -DBN=256 -DBK=16 -DWM=32 -DWN=64 -DWNITER=2 -DTM=8 -DTN=4 -DNUM_THREADS=256 -DSTAGES=2 -DMIN_BLOCKS=1 -DSPLITK_WORKSPACE=8388608
tall -DBM=128 -DBN=128 -DBK=8 -DWM=64 -DWN=64 -DWNITER=2 -DTM=8 -DTN=4 -DNUM_THREADS=128 -DSTAGES=2 -DMIN_BLOCKS=2 -DSPLITK_WORKSPACE=8388608
wide -DBM=128 -DBN=256 -DBK=16 -DWM=64 -DWN=64 -DWNITER=2 -DTM=8 -DTN=4 -DNUM_THREADS=256 -DSTAGES=2 -DMIN_BLOCKS=1 -DSPLITK_WORKSPACE=8388608
largek -DBM=64 -DBN=256 -DBK=16 -DWM=32 -DWN=64 -DWNITER=2 -DTM=8 -DTN=4 -DNUM_THREADS=256 -DSTAGES=2 -DMIN_BLOCKS=1 -DSPLITK_WORKSPACE=8388608
CL
