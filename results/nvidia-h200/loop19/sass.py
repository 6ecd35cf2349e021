"""Parse nvdisasm -hex output (sm_90), find the main loop (the backward branch spanning most FFMAs),
report opcode counts, stall-count distribution, wait/scoreboard use, register-bank conflicts."""
import re, sys, collections
INS = re.compile(r'/\*([0-9a-f]{4,})\*/\s+(.*?);\s*/\* (0x[0-9a-f]+) \*/')
HI = re.compile(r'^\s*/\* (0x[0-9a-f]+) \*/\s*$')
def parse(path):
    lines = open(path).read().splitlines()
    out = []; labels = {}
    for i, l in enumerate(lines):
        m = re.match(r'^\.(L_x_\d+):', l.strip())
        if m: labels[m.group(1)] = None; pend = m.group(1); labels[pend] = len(out); continue
        m = INS.search(l)
        if m:
            hi = HI.match(lines[i + 1]); hi = int(hi.group(1), 16)
            ctrl = hi >> 41
            out.append(dict(addr=int(m.group(1), 16), text=m.group(2).strip(), stall=ctrl & 0xf, yld=(ctrl >> 4) & 1,
                            wb=(ctrl >> 5) & 7, rb=(ctrl >> 8) & 7, wmask=(ctrl >> 11) & 0x3f, reuse=(ctrl >> 17) & 0xf))
    return out, labels
def op(t):
    t = re.sub(r'^@!?U?P\w+\s+', '', t); return t.split()[0]
def regs(t):
    t = re.sub(r'^@!?U?P\w+\s+', '', t)
    parts = t.split(None, 1)
    if len(parts) < 2: return []
    return [a.strip() for a in parts[1].split(',')]
def main(path, verbose=False):
    ins, labels = parse(path)
    best = None
    for idx, d in enumerate(ins):
        m = re.search(r'BRA\s+(?:`\()?\.?(L_x_\d+)', d['text'])
        if m and m.group(1) in labels and labels[m.group(1)] is not None and labels[m.group(1)] <= idx:
            s = labels[m.group(1)]
            n = sum(op(x['text']).startswith('FFMA') for x in ins[s:idx + 1])
            if best is None or n >= best[2]: best = (s, idx, n)
    s, e, n = best
    body = ins[s:e + 1]
    ops = collections.Counter(op(x['text']) for x in body)
    stalls = collections.Counter(x['stall'] for x in body)
    print(f"{path}: loop [{body[0]['addr']:#x},{body[-1]['addr']:#x}] {len(body)} instr, FFMA {n}, sum stall {sum(x['stall'] for x in body)}")
    print("  ops:", dict(ops.most_common()))
    print("  stall counts:", dict(sorted(stalls.items())))
    print("  non-FFMA with stall>1:", collections.Counter(op(x['text']) for x in body if x['stall'] > 1 and not op(x['text']).startswith('FFMA')))
    # bank conflicts among FFMA sources
    c2 = c3 = reused = 0; pairs_same = 0
    for x in body:
        if not op(x['text']).startswith('FFMA'): continue
        a = regs(x['text'])[1:4]
        srcs = []
        for k, r in enumerate(a):
            r = r.replace('.reuse', '').replace('-', '').replace('|', '')
            if x['reuse'] >> k & 1: reused += 1; continue   # reuse bit k = operand slot k (a,b,c)
            m = re.match(r'R(\d+)$', r)
            if m: srcs.append(int(m.group(1)))
        par = collections.Counter(r % 2 for r in srcs)
        if len(srcs) == 3 and max(par.values()) == 3: c3 += 1
        if max(par.values(), default=0) >= 2: c2 += 1
    print(f"  FFMA operands reused {reused}; FFMA with >=2 non-reused sources in one bank (r%2) {c2}, all 3 {c3}")
    # LDS spacing: distance from LDS to first use of its destination
    return body
if __name__ == '__main__':
    for p in sys.argv[1:]: main(p)

def banks(body, nb=2):
    """FFMA register-bank conflicts, reuse cache modelled: a source in slot k is free when the previous
    instruction set .reuse on slot k for the same register. Returns counts of FFMAs whose register-file
    reads (not from the cache) include 2+ / 3 in one bank (bank = reg % nb)."""
    import collections
    cache = [None] * 3; c2 = c3 = 0; free = 0
    for x in body:
        o = op(x['text'])
        a = regs(x['text'])
        if not o.startswith('FFMA'):
            cache = [None] * 3   # conservative: any other instruction clears the cache
            continue
        srcs = []
        newcache = [None] * 3
        for k, r in enumerate(a[1:4]):
            r0 = r.replace('.reuse', '').lstrip('-|')
            m = re.match(r'R(\d+)$', r0)
            if not m: continue
            n = int(m.group(1))
            if cache[k] == n: free += 1
            else: srcs.append(n)
            if x['reuse'] >> k & 1: newcache[k] = n
        cache = newcache
        cnt = collections.Counter(r % nb for r in srcs)
        if cnt and max(cnt.values()) >= 2: c2 += 1
        if cnt and max(cnt.values()) >= 3: c3 += 1
    return free, c2, c3

def lds_distance(body):
    """For each LDS.128 in the loop: instructions until the first reader of its destination registers
    (wrapping around the loop). Returns the sorted list of distances."""
    out = []
    n = len(body)
    for i, x in enumerate(body):
        if not op(x['text']).startswith('LDS.128'): continue
        r0 = int(re.match(r'R(\d+)', regs(x['text'])[0]).group(1))
        dst = {f'R{r0 + q}' for q in range(4)}
        for d in range(1, n):
            y = body[(i + d) % n]
            srcs = [s.replace('.reuse', '').lstrip('-|') for s in regs(y['text'])[1:]]
            srcs += re.findall(r'R\d+', ' '.join(regs(y['text'])[1:]))
            if dst & set(srcs):
                out.append(d); break
    return sorted(out)
