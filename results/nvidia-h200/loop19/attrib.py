"""Attribute ncu source-page stall samples (csv) to the main loop's instructions of the same cubin (SASS from build.sh)."""
import csv, sys, re, collections
import sass
def load(csvpath):
    rows = list(csv.reader(open(csvpath)))
    hdr = rows[1]; data = rows[2:]
    base = int(data[0][0], 16)
    out = {}
    for r in data:
        d = dict(zip(hdr, r)); out[int(d['Address'], 16) - base] = d
    return out
def conflicts(body):
    cache = [None] * 3; res = {}
    for x in body:
        o = sass.op(x['text']); a = sass.regs(x['text'])
        if not o.startswith('FFMA'): cache = [None] * 3; continue
        srcs = []; nc = [None] * 3
        for k, r in enumerate(a[1:4]):
            n = int(re.match(r'R(\d+)', r.lstrip('-|')).group(1))
            if cache[k] != n: srcs.append(n)
            if x['reuse'] >> k & 1: nc[k] = n
        cache = nc
        res[x['addr']] = len(srcs) == 3 and len(set(s % 2 for s in srcs)) == 1
    return res
def main(csvpath, sasspath):
    prof = load(csvpath)
    ins, labels = sass.parse(sasspath)
    import io, contextlib
    with contextlib.redirect_stdout(io.StringIO()): body = sass.main(sasspath)
    reasons = ['stall_dispatch', 'stall_wait', 'stall_short_sb', 'stall_not_selected', 'stall_selected', 'stall_no_inst',
               'stall_barrier', 'stall_long_sb', 'stall_mio', 'stall_branch_resolving', 'stall_math', 'stall_lg', 'stall_drain', 'stall_misc']
    tot_all = collections.Counter()
    for a, d in prof.items():
        for k in reasons: tot_all[k] += int(d.get(k, 0) or 0)
    loop = collections.Counter(); byop = collections.defaultdict(collections.Counter)
    conf = conflicts(body); cstat = {True: collections.Counter(), False: collections.Counter()}; ccount = collections.Counter()
    pre = collections.Counter()
    first_ffma = next(i for i, x in enumerate(body) if sass.op(x['text']).startswith('FFMA'))
    for i, x in enumerate(body):
        d = prof.get(x['addr'])
        if d is None: continue
        assert d['Source'].strip().split()[0].lstrip('@!P0123456789T ') or True
        o = sass.op(x['text'])
        for k in reasons:
            v = int(d.get(k, 0) or 0); loop[k] += v
            byop['FFMA' if o.startswith('FFMA') else ('LDS' if o.startswith('LDS') else 'other')][k] += v
            if i < first_ffma: pre[k] += v
        if x['addr'] in conf:
            ccount[conf[x['addr']]] += 1
            for k in reasons: cstat[conf[x['addr']]][k] += int(d.get(k, 0) or 0)
    n = sum(loop.values())
    print(csvpath, 'samples: kernel', sum(tot_all.values()), 'loop', n)
    print('  loop by reason (% of loop samples):', {k[6:]: round(100 * v / n, 1) for k, v in loop.most_common()})
    for g, c in byop.items(): print('  ', g, {k[6:]: v for k, v in c.most_common(6)})
    print('  preamble (before first FFMA):', {k[6:]: v for k, v in pre.most_common(6)})
    for flag in (True, False):
        c = cstat[flag]; m = ccount[flag]
        print(f'  FFMA conflict-model={flag}: {m} instr, per instr: dispatch {c["stall_dispatch"]/m:.1f} wait {c["stall_wait"]/m:.1f} selected {c["stall_selected"]/m:.1f} not_sel {c["stall_not_selected"]/m:.1f}')
    # top instructions by dispatch and wait
    for key in ('stall_dispatch', 'stall_wait', 'stall_short_sb', 'stall_no_inst'):
        top = sorted(body, key=lambda x: -int(prof.get(x['addr'], {}).get(key, 0) or 0))[:8]
        print('  top', key, [(body.index(x), int(prof[x['addr']][key]), x['text'][:40]) for x in top])
if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
