// Analysis mode (see analysis.h). Threads of a block run one after another,
// so a warp's request is assembled from its lanes' n-th execution of the same
// access site, and a race is two threads touching one shared word in the same
// barrier interval without a warp-level sync between them. Shared requests go
// through the bank rule, global ones through the sector rule.
#include "analysis.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <array>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

extern "C" {
extern uint3 blockIdx;
}

namespace emu {
namespace analysis {

static bool active;
static LaunchRanges R;
static uintptr_t module_lo, module_hi, runtime_lo, runtime_hi;
static uint3 block;
static unsigned epoch = 1;  // barrier intervals, increasing across blocks
static std::vector<unsigned> warp_epoch;

// Per-thread count of executions of each access site: a tiny open hash.
struct Occurrence { uintptr_t pc; unsigned count; };
static const unsigned kSitesPerThread = 256;
static std::vector<Occurrence> occurrences;

struct RequestKey {
    unsigned warp;
    unsigned occurrence;
    uintptr_t pc;
    bool operator==(const RequestKey& o) const { return warp == o.warp && occurrence == o.occurrence && pc == o.pc; }
};
struct RequestKeyHash {
    size_t operator()(const RequestKey& k) const { return (k.pc * 31 + k.warp) * 1000003u + k.occurrence; }
};
struct Request {
    int size;
    bool store;
    int buffer;  // global requests: the launch buffer of the first lane
    unsigned lanes;
    uintptr_t addr[32];
};
static std::unordered_map<RequestKey, Request, RequestKeyHash> requests, global_requests;
static std::map<std::pair<uintptr_t, int>, EmuSiteStats> sites;
static std::map<std::pair<uintptr_t, int>, EmuGlobalStats> global_sites;
// A block's global requests wait in memory until the block ends; past this many
// (about 80 MB), new ones are counted as dropped instead (a long-running loop).
static const size_t kMaxGlobalRequests = size_t(1) << 18;
static unsigned long long global_dropped;  // accesses not counted, since the analysis was enabled
static unsigned long long barriers;        // __syncthreads() releases of whole blocks, since then
static unsigned long long async_bytes;     // global bytes cp.async copies read, since then

struct Shadow {
    unsigned write_epoch, write_wepoch, read_epoch, read_wepoch;
    int write_tid, read_tid, other_reader;  // other_reader: a second reader in the interval, or -1
    uintptr_t write_pc, read_pc;
    bool read_async;                        // read_tid's read is a wgmma's (async_read)
};
static std::vector<Shadow> shadow;  // static shared words, then dynamic ones
// Words accessed in halves (16-bit elements: bfloat16, half, short): the states of their two halves, split from
// the word's at the first access of fewer than 4 bytes, so that threads writing the two halves of one word do
// not race. (A byte is watched as the half it lies in.)
static std::unordered_map<size_t, std::array<Shadow, 2>> halves;
static std::map<std::tuple<int, uintptr_t, uintptr_t>, EmuRace> races;
static std::vector<EmuFinding> findings;

// ---- the asynchronous proxy ------------------------------------------------------
// Threads that synchronise through mbarriers share no barrier interval, so a launch of a module that
// uses the asynchronous proxy (include/hopper.cuh) also keeps a happens-before order: a vector clock per
// thread, with an entry for each thread and one for each mbarrier (its completed phases).
// __syncthreads() and warp syncs join the clocks of the threads they release; an arrival adds the
// thread's clock to its phase, and a wait that the phase ends takes that phase's clock. A bulk copy
// must come after every access to the words it overwrites (a consumer releasing a stage before the
// producer refills it), and an access to what a copy fills after a wait for the phase that copy
// completes. A bulk copy that reads or overwrites what ordinary stores wrote must also come after a
// proxy fence of the storing thread, a bulk store's source may be written again only once its
// thread's wait for it is ordered before that write, and an mbarrier's initialisation must be ordered
// before every use of it.
struct Accessor { unsigned tid, clock, store_clock; uintptr_t pc, store_pc; };   // store_clock 0: no store
struct AsyncWord {
    std::vector<Accessor> accessors;    // generic accesses since the last bulk copy (at most kAccessors)
    size_t bar = 0;                     // the clock entry of the mbarrier its last copy completes on (0: none)
    unsigned phase = 0;                 // that mbarrier's completed phases once the copy has landed
    unsigned tid = 0;
    uintptr_t pc = 0;
    bool stored = false;                // a bulk store reads it: issued by store_tid, its store_seq-th
    unsigned store_tid = 0, store_seq = 0;
    uintptr_t store_pc = 0;
};
static const size_t kAccessors = 64;
static bool order_launch;                       // the launch's module uses the asynchronous proxy
static bool ordered;                            // this block keeps the order below
static unsigned block_threads;
static std::vector<std::vector<unsigned>> clocks;
static std::vector<std::vector<unsigned>> fences;     // per thread: its clock at each proxy fence
// per thread: (how many of its bulk stores are done, its clock) at each of its waits for them
static std::vector<std::vector<std::pair<unsigned, unsigned>>> store_waits;
// An mbarrier's clocks: of the phase in progress's arrivals, and of the last completed phase of each parity.
struct Phase {
    std::vector<unsigned> arrived, completed[2];
    size_t entry;
    unsigned count;
    unsigned init_tid, init_clock;    // who initialised it, when
    uintptr_t init_pc;
};
static std::map<const void*, Phase> phases;
static std::vector<AsyncWord> async_words;      // parallel to shadow

static void image_range(const void* addr, uintptr_t* lo, uintptr_t* hi) {
    Dl_info info;
    *lo = *hi = 0;
    if (!dladdr(addr, &info)) return;
    struct Ctx { uintptr_t base, lo, hi; } ctx{reinterpret_cast<uintptr_t>(info.dli_fbase), UINTPTR_MAX, 0};
    dl_iterate_phdr([](dl_phdr_info* i, size_t, void* p) {
        auto* c = static_cast<Ctx*>(p);
        uintptr_t lo = UINTPTR_MAX, hi = 0;
        for (int k = 0; k < i->dlpi_phnum; k++) {
            if (i->dlpi_phdr[k].p_type != PT_LOAD) continue;
            lo = std::min<uintptr_t>(lo, i->dlpi_addr + i->dlpi_phdr[k].p_vaddr);
            hi = std::max<uintptr_t>(hi, i->dlpi_addr + i->dlpi_phdr[k].p_vaddr + i->dlpi_phdr[k].p_memsz);
        }
        if (c->base >= lo && c->base < hi) { c->lo = lo; c->hi = hi; return 1; }
        return 0;
    }, &ctx);
    *lo = ctx.lo;
    *hi = ctx.hi;
}

bool enabled() { return active; }

void begin_launch(const LaunchRanges& r, int nthreads) {
    R = r;
    image_range(r.module_fn, &module_lo, &module_hi);
    image_range(reinterpret_cast<const void*>(&begin_launch), &runtime_lo, &runtime_hi);
    occurrences.assign(size_t(nthreads) * kSitesPerThread, Occurrence{0, 0});
    warp_epoch.assign(size_t((nthreads + 31) / 32), 0);
    block_threads = unsigned(nthreads);
    shadow.assign(size_t(r.shared_hi - r.shared_lo) / 4 + r.dynamic_size / 4 + 1, Shadow{});
    halves.clear();
    findings.clear();
}

void begin_block(uint3 b) {
    block = b;
    epoch++;
    phases.clear();
    ordered = order_launch;
    clocks.assign(ordered ? block_threads : 0, std::vector<unsigned>(ordered ? block_threads : 0, 0));
    for (unsigned t = 0; t < clocks.size(); t++) clocks[t][t] = 1;
    fences.assign(clocks.size(), {});
    store_waits.assign(clocks.size(), {});
    async_words.assign(ordered ? shadow.size() : 0, AsyncWord{});
    std::fill(occurrences.begin(), occurrences.end(), Occurrence{0, 0});
    requests.clear();
    global_requests.clear();
}

static void race(int kind, uintptr_t pc_a, int tid_a, uintptr_t pc_b, unsigned tid_b, uintptr_t addr);
static void check_word(size_t w, unsigned lo, unsigned hi, bool store, unsigned me, uintptr_t pc, uintptr_t addr,
                       bool async = false);

// ---- the asynchronous proxy's order (its state is above) ---------------------------
static void join(std::vector<unsigned>& into, const std::vector<unsigned>& from) {
    if (from.size() > into.size()) into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); i++) into[i] = std::max(into[i], from[i]);
}

static unsigned clock_of(unsigned tid, size_t entry) { return entry < clocks[tid].size() ? clocks[tid][entry] : 0; }

// What thread `tid` knows of thread `other`'s clock (its own: all of it).
static unsigned known(unsigned tid, unsigned other) { return tid == other ? clocks[tid][tid] : clock_of(tid, other); }

// The threads [first, first + n) released together: each knows what any of them knew, then moves on.
static void release_together(unsigned first, unsigned n) {
    if (!ordered) return;
    std::vector<unsigned> all;
    for (unsigned t = first; t < first + n && t < block_threads; t++) join(all, clocks[t]);
    for (unsigned t = first; t < first + n && t < block_threads; t++) {
        clocks[t] = all;
        clocks[t][t]++;
    }
}

void mbarrier_init(const void* bar, unsigned tid, uintptr_t pc) {
    if (!ordered) return;
    size_t entry = phases.count(bar) ? phases[bar].entry : block_threads + phases.size();
    phases[bar] = Phase{{}, {{}, {}}, entry, 0, tid, clocks[tid][tid], pc};
}

void mbarrier_used(const void* bar, unsigned tid, uintptr_t pc) {
    auto it = phases.find(bar);
    if (it != phases.end() && known(tid, it->second.init_tid) < it->second.init_clock)
        race(8, it->second.init_pc, int(it->second.init_tid), pc, tid, reinterpret_cast<uintptr_t>(bar));
}

void mbarrier_arrive(const void* bar, unsigned tid) {
    auto it = phases.find(bar);
    if (it == phases.end()) return;
    join(it->second.arrived, clocks[tid]);
    clocks[tid][tid]++;
}

void mbarrier_completed(const void* bar) {
    auto it = phases.find(bar);
    if (it == phases.end()) return;
    Phase& p = it->second;
    std::vector<unsigned>& done = p.completed[p.count % 2];
    done = std::move(p.arrived);
    p.arrived.clear();
    if (done.size() <= p.entry) done.resize(p.entry + 1, 0);
    done[p.entry] = ++p.count;
}

void mbarrier_passed(const void* bar, unsigned parity, unsigned tid) {
    auto it = phases.find(bar);
    if (it != phases.end()) join(clocks[tid], it->second.completed[parity & 1]);
}

// The shadow's index of a shared address: static shared words, then dynamic ones.
static size_t word_of(uintptr_t a) {
    auto slo = reinterpret_cast<uintptr_t>(R.shared_lo), shi = reinterpret_cast<uintptr_t>(R.shared_hi);
    if (a >= slo && a < shi) return (a - slo) / 4;
    return size_t(shi - slo) / 4 + (a - reinterpret_cast<uintptr_t>(R.dynamic_lo)) / 4;
}

// A proxy fence of thread w between its store at clock c and what `tid` knows of w.
static bool fenced(unsigned w, unsigned c, unsigned tid) {
    auto f = std::lower_bound(fences[w].begin(), fences[w].end(), c);
    return f != fences[w].end() && *f < known(tid, w);
}

void proxy_fence(unsigned tid) {
    if (!ordered) return;
    fences[tid].push_back(clocks[tid][tid]);
    clocks[tid][tid]++;
}

void bulk_copy(const void* dst, unsigned bytes, const void* bar, unsigned tid, uintptr_t pc) {
    auto it = phases.find(bar);
    if (!ordered || it == phases.end()) return;
    auto a = reinterpret_cast<uintptr_t>(dst);
    for (unsigned off = 0; off < bytes; off += 4) {
        size_t w = word_of(a + off);
        if (w >= async_words.size()) return;
        AsyncWord& word = async_words[w];
        for (const Accessor& x : word.accessors) {
            if (known(tid, x.tid) < x.clock)
                race(3, x.pc, int(x.tid), pc, tid, a + off);
            else if (x.store_clock && !fenced(x.tid, x.store_clock, tid))
                race(5, x.store_pc, int(x.tid), pc, tid, a + off);
        }
        word = AsyncWord{{}, it->second.entry, it->second.count + 1, tid, pc};
    }
}

void bulk_store(const void* src, unsigned bytes, unsigned tid, unsigned seq, uintptr_t pc) {
    if (!ordered) return;
    auto a = reinterpret_cast<uintptr_t>(src);
    for (unsigned off = 0; off < bytes; off += 4) {
        size_t w = word_of(a + off);
        if (w >= async_words.size()) return;
        AsyncWord& word = async_words[w];
        for (const Accessor& x : word.accessors) {
            if (!x.store_clock) continue;
            if (known(tid, x.tid) < x.store_clock)
                race(7, x.store_pc, int(x.tid), pc, tid, a + off);
            else if (!fenced(x.tid, x.store_clock, tid))
                race(5, x.store_pc, int(x.tid), pc, tid, a + off);
        }
        word.stored = true;
        word.store_tid = tid;
        word.store_seq = seq;
        word.store_pc = pc;
    }
}

void bulk_store_waited(unsigned tid, unsigned stores_done) {
    if (!ordered) return;
    store_waits[tid].push_back({stores_done, clocks[tid][tid]});
    clocks[tid][tid]++;
}

// Whether the wait of thread p that finished its seq-th bulk store is ordered before what `me` does now.
static bool store_waited(unsigned p, unsigned seq, unsigned me) {
    for (auto& [done, clock] : store_waits[p])
        if (done > seq) return clock < known(me, p);
    return false;
}

static void check_async(size_t w, bool store, unsigned me, uintptr_t pc, uintptr_t addr) {
    AsyncWord& word = async_words[w];
    if (word.bar && clock_of(me, word.bar) < word.phase) race(4, word.pc, int(word.tid), pc, me, addr);
    if (store && word.stored) {
        if (!store_waited(word.store_tid, word.store_seq, me))
            race(6, word.store_pc, int(word.store_tid), pc, me, addr);
        word.stored = false;
    }
    for (Accessor& x : word.accessors)
        if (x.tid == me) {
            x.clock = clocks[me][me];
            x.pc = pc;
            if (store) { x.store_clock = x.clock; x.store_pc = pc; }
            return;
        }
    if (word.accessors.size() < kAccessors)
        word.accessors.push_back(Accessor{me, clocks[me][me], store ? clocks[me][me] : 0, pc, store ? pc : 0});
}

// A wgmma's read of shared memory (the asynchronous proxy), at the wait that completes it, by the thread that
// issued it: ordered as that thread's read there, and after a proxy fence of each thread whose store it reads.
void async_read(const void* p, unsigned bytes, unsigned tid, uintptr_t pc) {
    auto a = reinterpret_cast<uintptr_t>(p);
    for (unsigned off = 0; off < bytes; off += 4) {
        size_t w = word_of(a + off);
        if (w >= shadow.size()) return;
        check_word(w, 0, 4, false, tid, pc, a + off, true);
        if (!ordered) continue;
        for (const Accessor& x : async_words[w].accessors)
            if (x.store_clock && known(tid, x.tid) >= x.store_clock && !fenced(x.tid, x.store_clock, tid))
                race(9, x.store_pc, int(x.tid), pc, tid, a + off);
        check_async(w, false, tid, pc, a + off);
    }
}

void barrier_released() { epoch++; barriers++; release_together(0, block_threads); }
void warp_released(unsigned warp) { warp_epoch[warp]++; release_together(warp * 32, 32); }

// ---- bank conflicts -----------------------------------------------------------
// The one bank rule of the project (grader/autotune.py calls it through ctypes):
// 32 banks of 4 bytes. A request is served in phases: the whole warp for
// accesses up to 4 bytes, half-warps for 8 bytes, quarter-warps for 16. In a
// phase, each bank serves one distinct 4-byte word per wavefront (lanes that
// touch the same word share it).
extern "C" unsigned long long emu_bank_wavefronts(const uintptr_t* addr, unsigned lanes, int size,
                                                  unsigned long long* ideal_out, int* max_ways_out) {
    int lanes_per_phase = size <= 4 ? 32 : size == 8 ? 16 : 8;
    unsigned long long wavefronts = 0, ideal = 0;
    int max_ways = 0;
    if (size > 16) lanes_per_phase = 0;  // no such access (the words[][] below hold 16 bytes a lane)
    for (int p0 = 0; lanes_per_phase && p0 < 32; p0 += lanes_per_phase) {
        uintptr_t words[32][32];  // a phase touches at most 32 words
        int nwords[32] = {0};
        bool any = false;
        for (int lane = p0; lane < p0 + lanes_per_phase; lane++) {
            if (!((lanes >> lane) & 1)) continue;
            any = true;
            uintptr_t first = addr[lane] / 4, last = (addr[lane] + std::max(size, 1) - 1) / 4;
            for (uintptr_t w = first; w <= last; w++) {
                int bank = int(w % 32);
                bool seen = false;
                for (int i = 0; i < nwords[bank]; i++) seen |= words[bank][i] == w;
                if (!seen) words[bank][nwords[bank]++] = w;
            }
        }
        if (!any) continue;
        int ways = 0;
        for (int b = 0; b < 32; b++) ways = std::max(ways, nwords[b]);
        wavefronts += ways;
        ideal += 1;
        max_ways = std::max(max_ways, ways);
    }
    if (ideal_out) *ideal_out = ideal;
    if (max_ways_out) *max_ways_out = max_ways;
    return wavefronts;
}

static void evaluate(const RequestKey& key, const Request& q) {
    unsigned long long ideal = 0;
    int max_ways = 0;
    unsigned long long wavefronts = emu_bank_wavefronts(q.addr, q.lanes, q.size, &ideal, &max_ways);
    EmuSiteStats& s = sites[{key.pc, q.store}];
    if (!s.requests) { s.pc = key.pc; s.store = q.store; s.size = q.size; s.worst_conflicts = -1; }
    s.requests++;
    s.wavefronts += wavefronts;
    s.ideal_wavefronts += ideal;
    s.max_ways = std::max(s.max_ways, max_ways);
    int conflicts = int(wavefronts - ideal);
    if (conflicts > s.worst_conflicts) {
        s.worst_conflicts = conflicts;
        s.worst_lanes = q.lanes;
        s.worst_warp = key.warp;
        s.worst_block = block;
        std::copy(q.addr, q.addr + 32, s.worst_addr);
    }
}

// ---- coalescing ---------------------------------------------------------------
// A warp's global request is served in 32-byte sectors: it costs the number of
// distinct sectors its lanes touch (lanes reading the same bytes share them).
extern "C" unsigned emu_global_sectors(const uintptr_t* addr, unsigned lanes, int size, unsigned* ideal_out) {
    static std::vector<uintptr_t> sectors;
    uintptr_t starts[32];
    int n = 0;
    sectors.clear();
    size = std::max(size, 1);
    for (int lane = 0; lane < 32; lane++) {
        if (!((lanes >> lane) & 1)) continue;
        starts[n++] = addr[lane];
        for (uintptr_t s = addr[lane] / 32; s <= (addr[lane] + size - 1) / 32; s++) sectors.push_back(s);
    }
    std::sort(sectors.begin(), sectors.end());
    unsigned distinct = unsigned(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
    if (ideal_out) {
        // the union of the lanes' byte ranges, packed into whole sectors
        std::sort(starts, starts + n);
        uintptr_t bytes = 0, covered = 0;
        for (int i = 0; i < n; i++) {
            uintptr_t lo = std::max(starts[i], covered), hi = starts[i] + size;
            if (hi > lo) bytes += hi - lo;
            covered = std::max(covered, hi);
        }
        *ideal_out = unsigned((bytes + 31) / 32);
    }
    return distinct;
}

static void evaluate_global(const RequestKey& key, const Request& q) {
    unsigned ideal = 0;
    unsigned sectors = emu_global_sectors(q.addr, q.lanes, q.size, &ideal);
    EmuGlobalStats& s = global_sites[{key.pc, q.store}];
    if (!s.requests) {
        s.pc = key.pc; s.store = q.store; s.size = q.size; s.buffer = q.buffer; s.worst_excess = -1;
    }
    s.requests++;
    s.sectors += sectors;
    s.ideal_sectors += ideal;
    s.bytes += (unsigned long long)__builtin_popcount(q.lanes) * unsigned(q.size);
    int excess = int(sectors) - int(ideal);
    if (excess > s.worst_excess) {
        s.worst_excess = excess;
        s.worst_lanes = q.lanes;
        s.worst_warp = key.warp;
        s.worst_block = block;
        std::copy(q.addr, q.addr + 32, s.worst_addr);
    }
}

// In the order of (warp, occurrence, line), so that of equally bad requests the first is the one shown,
// whatever the hash table's order (which moves with the code's load address).
template <class Map, class F> static void in_order(const Map& m, F f) {
    std::vector<const typename Map::value_type*> all;
    all.reserve(m.size());
    for (auto& kv : m) all.push_back(&kv);
    std::sort(all.begin(), all.end(), [](auto* a, auto* b) {
        return std::tie(a->first.warp, a->first.occurrence, a->first.pc) <
               std::tie(b->first.warp, b->first.occurrence, b->first.pc);
    });
    for (auto* kv : all) f(kv->first, kv->second);
}

void end_block() {
    in_order(requests, evaluate);
    in_order(global_requests, evaluate_global);
    requests.clear();
    global_requests.clear();
}

static unsigned next_occurrence(unsigned thread, uintptr_t pc) {
    Occurrence* table = &occurrences[size_t(thread) * kSitesPerThread];
    unsigned h = unsigned((pc >> 2) * 2654435761u) % kSitesPerThread;
    for (unsigned i = 0; i < kSitesPerThread; i++) {
        Occurrence& o = table[(h + i) % kSitesPerThread];
        if (o.pc == pc) return o.count++;
        if (o.pc == 0) { o.pc = pc; return o.count++; }
    }
    return 0;  // more sites than the table holds: group them as first executions
}

// ---- races ----------------------------------------------------------------------
static bool ordered_in_warp(int other, unsigned other_wepoch, unsigned me) {
    return unsigned(other) / 32 == me / 32 && warp_epoch[me / 32] > other_wepoch;
}

static void race(int kind, uintptr_t pc_a, int tid_a, uintptr_t pc_b, unsigned tid_b, uintptr_t addr) {
    auto key = std::make_tuple(kind, pc_a, pc_b);
    auto it = races.find(key);
    if (it != races.end()) { it->second.count++; return; }
    if (races.size() >= 256) return;
    races[key] = EmuRace{kind, pc_a, pc_b, unsigned(tid_a), tid_b, block, addr, 1};
}

static void check_race(Shadow& w, bool store, unsigned me, uintptr_t pc, uintptr_t addr, bool async) {
    unsigned we = warp_epoch[me / 32];
    if (w.write_epoch == epoch && w.write_tid != int(me) && !ordered_in_warp(w.write_tid, w.write_wepoch, me))
        race(store ? 2 : 0, w.write_pc, w.write_tid, pc, me, addr);
    if (store) {
        if (w.read_epoch == epoch) {
            int reader = w.read_tid != int(me) ? w.read_tid : w.other_reader;
            if (reader >= 0 && (reader != w.read_tid || !ordered_in_warp(reader, w.read_wepoch, me)))
                race(w.read_async ? 10 : 1, w.read_pc, reader, pc, me, addr);
        }
        w.write_epoch = epoch;
        w.write_wepoch = we;
        w.write_tid = int(me);
        w.write_pc = pc;
        w.read_epoch = 0;
    } else if (w.read_epoch != epoch) {
        w.read_epoch = epoch;
        w.read_wepoch = we;
        w.read_tid = int(me);
        w.other_reader = -1;
        w.read_pc = pc;
        w.read_async = async;
    } else if (w.read_tid != int(me)) {
        w.other_reader = int(me);
    }
}

// The races of an access to bytes [lo, hi) of shared word w.
static void check_word(size_t w, unsigned lo, unsigned hi, bool store, unsigned me, uintptr_t pc, uintptr_t addr,
                       bool async) {
    auto it = halves.find(w);
    if (it == halves.end()) {
        if (lo == 0 && hi == 4) {
            check_race(shadow[w], store, me, pc, addr, async);
            return;
        }
        it = halves.emplace(w, std::array<Shadow, 2>{shadow[w], shadow[w]}).first;
    }
    for (unsigned h = lo / 2; h < (hi + 1) / 2; h++) check_race(it->second[h], store, me, pc, addr, async);
}

// ---- the hook -------------------------------------------------------------------
static void record_finding(int kind, bool store, int size, uintptr_t pc, unsigned me, uintptr_t a, bool shared) {
    EmuFinding f{kind, store, size, pc, me, block, a, -1, 0, shared};
    if (!shared && R.nbuffers) {
        // the nearest buffer below the address (or the first one)
        size_t i = 0;
        while (i + 1 < R.nbuffers && R.buffers[2 * (i + 1)] <= a) i++;
        f.buffer = (long long)i;
        f.offset = (long long)(a - R.buffers[2 * i]);
    } else if (shared) {
        // From the start of shared memory, as on the GPU: static arrays first, then the dynamic ones.
        auto dyn = reinterpret_cast<uintptr_t>(R.dynamic_lo);
        bool in_dynamic = R.dynamic_size && a >= dyn && a < dyn + R.dynamic_size;
        f.offset = in_dynamic ? (long long)(R.shared_hi - R.shared_lo) + (long long)(a - dyn)
                              : (long long)(a - reinterpret_cast<uintptr_t>(R.shared_lo));
    }
    findings.push_back(f);
    fail_with_finding();
}

static void access(const void* p, int size, bool store, uintptr_t pc) {
    unsigned me;
    if (!active || !current_thread(&me)) return;
    auto a = reinterpret_cast<uintptr_t>(p);
    auto in = [a, size](const void* lo, size_t n) {
        auto l = reinterpret_cast<uintptr_t>(lo);
        return a >= l && a + size <= l + n;
    };
    bool in_static = in(R.shared_lo, size_t(R.shared_hi - R.shared_lo));
    bool in_dynamic = !in_static && R.dynamic_size && in(R.dynamic_lo, R.dynamic_size);
    if (in_static || in_dynamic) {
        if (size > 1 && a % uintptr_t(std::min(size, 16)) != 0)
            record_finding(1, store, size, pc, me, a, true);
        Request& q = requests[RequestKey{me / 32, next_occurrence(me, pc), pc}];
        if (!q.lanes) { q.size = size; q.store = store; }
        q.lanes |= 1u << (me % 32);
        // Offsets from the start of shared memory, as on the GPU (bank 0 there).
        q.addr[me % 32] = a - reinterpret_cast<uintptr_t>(in_static ? (void*)R.shared_lo : (void*)R.dynamic_lo);
        for (uintptr_t x = a & ~uintptr_t(3); x < a + uintptr_t(size); x += 4) {
            size_t w = word_of(x);
            check_word(w, unsigned(std::max(a, x) - x), unsigned(std::min<uintptr_t>(a + uintptr_t(size) - x, 4)), store,
                       me, pc, a);
            if (ordered) check_async(w, store, me, pc, a);
        }
        return;
    }
    if (on_fiber_stack(p) || (a >= module_lo && a < module_hi) || (a >= runtime_lo && a < runtime_hi) ||
        in(R.params, R.params_size) || in(R.warp_slots, R.warp_slots_size))
        return;
    // global memory: inside one of the launch's buffers, naturally aligned
    const uintptr_t* b = R.buffers;
    size_t lo = 0, hi = R.nbuffers;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (b[2 * mid] <= a) lo = mid + 1; else hi = mid;
    }
    bool inside = lo > 0 && a + size <= b[2 * (lo - 1)] + b[2 * (lo - 1) + 1];
    // Outside every buffer and within one shared-memory size of the block's static shared arrays: an index
    // past a shared array. (The host may map a buffer right beside them: inside one, an address is global.)
    auto slo = reinterpret_cast<uintptr_t>(R.shared_lo), shi = reinterpret_cast<uintptr_t>(R.shared_hi);
    if (!inside && shi > slo && a + size > slo - (shi - slo) && a < shi + (shi - slo)) {
        record_finding(0, store, size, pc, me, a, true);
        return;
    }
    if (!inside) record_finding(0, store, size, pc, me, a, false);
    if (size > 1 && a % uintptr_t(std::min(size, 16)) != 0) record_finding(1, store, size, pc, me, a, false);
    RequestKey key{me / 32, next_occurrence(me, pc), pc};
    auto it = global_requests.find(key);
    if (it == global_requests.end()) {
        if (global_requests.size() >= kMaxGlobalRequests) { global_dropped++; return; }
        it = global_requests.emplace(key, Request{size, store, int(lo - 1), 0, {}}).first;
    }
    Request& q = it->second;
    q.lanes |= 1u << (me % 32);
    q.addr[me % 32] = a;
}

}  // namespace analysis
}  // namespace emu

using emu::analysis::access;

// GCC's instrumentation entry points (-fsanitize=kernel-address, calls mode).
#define EMU_HOOKS(n)                                                                                      \
    extern "C" void __asan_load##n##_noabort(void* p) { access(p, n, false, (uintptr_t)__builtin_return_address(0)); } \
    extern "C" void __asan_store##n##_noabort(void* p) { access(p, n, true, (uintptr_t)__builtin_return_address(0)); }
EMU_HOOKS(1)
EMU_HOOKS(2)
EMU_HOOKS(4)
EMU_HOOKS(8)
EMU_HOOKS(16)
extern "C" void __asan_loadN_noabort(void* p, size_t n) { access(p, int(n), false, (uintptr_t)__builtin_return_address(0)); }
extern "C" void __asan_storeN_noabort(void* p, size_t n) { access(p, int(n), true, (uintptr_t)__builtin_return_address(0)); }
extern "C" void __asan_handle_no_return(void) {}
extern "C" void __asan_register_globals(void*, size_t) {}
extern "C" void __asan_unregister_globals(void*, size_t) {}
extern "C" void __asan_before_dynamic_init(const char*) {}
extern "C" void __asan_after_dynamic_init(void) {}

// ---- host API -----------------------------------------------------------------------
// Whether the next launches' module uses the asynchronous proxy (grader/emulator/binding.py tells).
extern "C" void emu_analysis_order(int on) { emu::analysis::order_launch = on != 0; }

extern "C" void emu_analysis_enable(int on) {
    emu::analysis::active = on != 0;
    emu::analysis::sites.clear();
    emu::analysis::global_sites.clear();
    emu::analysis::global_dropped = 0;
    emu::analysis::barriers = 0;
    emu::analysis::async_bytes = 0;
    emu::analysis::races.clear();
    emu::analysis::findings.clear();
}

extern "C" size_t emu_analysis_sites(EmuSiteStats* out, size_t cap) {
    size_t n = 0;
    for (auto& kv : emu::analysis::sites) if (n < cap) out[n++] = kv.second;
    return emu::analysis::sites.size();
}

extern "C" size_t emu_analysis_global_sites(EmuGlobalStats* out, size_t cap) {
    size_t n = 0;
    for (auto& kv : emu::analysis::global_sites) if (n < cap) out[n++] = kv.second;
    return emu::analysis::global_sites.size();
}

extern "C" unsigned long long emu_analysis_global_dropped(void) { return emu::analysis::global_dropped; }

extern "C" unsigned long long emu_analysis_barriers(void) { return emu::analysis::barriers; }

extern "C" unsigned long long emu_analysis_async_bytes(void) { return emu::analysis::async_bytes; }

// A kernel's cp.async copy read `bytes` of global memory (include/cuda_pipeline_primitives.h, at the wait
// that completes it).
extern "C" void __emu_async_copied(unsigned bytes) {
    if (emu::analysis::active) emu::analysis::async_bytes += bytes;
}

extern "C" size_t emu_analysis_races(EmuRace* out, size_t cap) {
    size_t n = 0;
    for (auto& kv : emu::analysis::races) if (n < cap) out[n++] = kv.second;
    return emu::analysis::races.size();
}

extern "C" size_t emu_analysis_findings(EmuFinding* out, size_t cap) {
    size_t n = std::min(cap, emu::analysis::findings.size());
    std::copy(emu::analysis::findings.begin(), emu::analysis::findings.begin() + n, out);
    return emu::analysis::findings.size();
}

extern "C" void emu_analysis_clear(void) {
    emu::analysis::barriers = 0;
    emu::analysis::async_bytes = 0;
    emu::analysis::sites.clear();
    emu::analysis::global_sites.clear();
    emu::analysis::races.clear();
    emu::analysis::findings.clear();
}
