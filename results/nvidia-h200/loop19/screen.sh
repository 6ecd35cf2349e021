#!/bin/bash
# screen.sh NAME FLAGS...: build and print SASS metrics of the vec main loop
n=$1; shift; SRC=${SRC:-wt_var.cu}
./build.sh $SRC $n "$@" | grep -o "Used [0-9]* registers\|[0-9]* bytes spill stores" | tr '\n' ' '
python3 -c "
import sass, io, contextlib
with contextlib.redirect_stdout(io.StringIO()): b = sass.main('/tmp/b19_$n.sass')
d = sass.lds_distance(b); import re
print('$n', len(b), 'instr; stall', sum(x['stall'] for x in b), '; LDS<16', sum(x<16 for x in d), '<32', sum(x<32 for x in d), '<64', sum(x<64 for x in d), '; conflicts', sass.banks(b,2)[2])
"
