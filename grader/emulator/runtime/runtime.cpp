// The emulator's runtime: runs a kernel launch block after block, the threads
// of a block as fibers on the calling OS thread, with __syncthreads() and the
// warp primitives as scheduling points. A fault, a trap or a launch that
// outlives its time limit ends the launch with a message, never the process.
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <csetjmp>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "analysis.h"
#include "emu_abi.h"
#include "fiber.h"
#include "runtime.h"

extern "C" {
uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
unsigned char* __emu_dynamic_shared;
}

namespace emu {

enum FiberState { kReady, kAtBarrier, kAtWarp, kAtMbarrier, kDone };

struct Fiber {
    void* sp;
    uint3 tid;
    unsigned linear;
    int state;
    int line;          // where it waits
    int parity;        // which slot page its last warp exchange used
    unsigned took_part;  // lanes of its last warp exchange
    const void* mbarrier;  // the mbarrier it waits on (kAtMbarrier), for its phase of parity mbarrier_parity
    int mbarrier_parity;
    // Its bulk stores (shared -> global) not yet performed: each in a group once committed (-1 before),
    // performed when a wait leaves fewer groups pending, or when the thread exits.
    struct Store { void* dst; const void* src; unsigned bytes; int group; };
    std::vector<Store> stores;
    int groups_committed, groups_done;
    unsigned stores_done;
    // Its wgmmas not yet completed, in the order issued: each in a group once committed (-1 before), completed
    // by the wait that leaves fewer of its groups pending. `c` is what it adds to; `chained`: what the wgmma
    // before it on the same accumulators computes, handed over when that one completes.
    struct Wgmma {
        float* d;
        int n;
        uint64_t a, b;
        bool nmajor_b;                      // B N-major (K x N): wgmma_m64n*k16_bf16_nmajor
        std::vector<float> c;
        bool chained;
        int group, line;
        uintptr_t pc;
    };
    std::vector<Wgmma> wgmmas;
    int wgmma_committed;
    std::vector<const void*> fenced_maps;  // the tensor maps it has fenced (fence_proxy_tensormap)
};

// An mbarrier (the course's Hopper header, include/hopper.cuh): its phase completes when the expected
// arrivals have arrived and the bytes its bulk copies announce (expect_tx) have landed. A copy lands
// when the last arrival of its phase arrives, so that shared memory read before the wait still holds
// what was there (the block's poison, or the previous phase's data).
struct Mbarrier {
    unsigned expected = 0, pending = 0;
    long long tx = 0;          // bytes announced and not landed
    int phase = 0;             // the parity of the phase in progress
    int unwaited = 0;          // the line of a copy whose phase completed and no thread has waited for since
    int completed = 0;         // phases completed
    int first_wait = 0;        // the line of a wait that passed before any phase completed (for parity 1)
    struct Copy {
        void* dst;
        const void* src;
        unsigned bytes;
        std::vector<unsigned char> box;   // a tensor copy's box, gathered when it was issued (src unused)
        int line;
    };
    std::vector<Copy> copies;
};

struct Warp {
    unsigned alive, arrived, wanted;
    bool soft;  // an __activemask() rendezvous: lanes that went elsewhere are not active
    int parity;
    alignas(16) unsigned char slots[2][32][16];
};

struct LaunchState {
    Thunk thunk;
    void* fn;
    const unsigned char* params;
    const ModuleInfo* mod;
    const char* kernel;
    std::vector<Fiber> fibers;      // in the order a pass runs them
    std::vector<Warp> warps;
    std::vector<unsigned> slot;     // slot[linear]: that thread's place in `fibers`
    std::vector<unsigned char> dynamic_shared;
    bool sequential;   // the module calls nothing that waits for other threads: one fiber runs them in turn
    int nthreads, ndone, nbarrier;
    int barrier_line, barrier_count;  // of the threads waiting at a barrier: the first one's line, true predicates
    bool barrier_mixed;               // some wait at another line
    int pos;           // the scheduler's place in `fibers` during a pass
    int barrier_result, barrier_all, barrier_any;
    unsigned long long seed;
    std::map<const void*, Mbarrier> mbarriers;   // the block's, by address
    const uintptr_t* buffers;     // the device allocations, (start, size) pairs
    size_t nbuffers;
};

static LaunchState L;
static Fiber* cur;
static void* scheduler_sp;
static std::string error_text, output_text;
static const size_t kOutputLimit = 1 << 20;  // like the GPU's printf FIFO

// ---- stacks ---------------------------------------------------------------
static char* stacks;
static size_t stack_size, stack_stride, stack_count;
static size_t page_size() {
    static const size_t size = (size_t)sysconf(_SC_PAGESIZE);
    return size;
}
// Stacks a power-of-two stride apart would put every fiber's top frames (what
// each switch saves and reloads) in the same few cache sets, which thrashes the
// caches with a large block; fiber i's stack top moves down by a colour of its
// own, within an extra kColourSpan above each stack.
static const size_t kColourSpan = 64 * 1024, kColourStep = 64 * 9;
static size_t stack_colour(size_t i) { return (i * kColourStep) % kColourSpan; }

static bool ensure_stacks(size_t n) {
    if (n <= stack_count) return true;
    if (stacks) munmap(stacks, stack_stride * stack_count);
    stack_size = 256 * 1024;
    stack_stride = stack_size + kColourSpan + page_size();  // one guard page below each stack
    void* p = mmap(nullptr, stack_stride * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) { stacks = nullptr; stack_count = 0; return false; }
    stacks = static_cast<char*>(p);
    stack_count = n;
    for (size_t i = 0; i < n; i++) mprotect(stacks + i * stack_stride, page_size(), PROT_NONE);
    return true;
}
static bool in_guard_page(const void* addr) {
    auto a = static_cast<const char*>(addr);
    if (!stacks || a < stacks || a >= stacks + stack_stride * stack_count) return false;
    return size_t(a - stacks) % stack_stride < page_size();
}

// ---- errors ----------------------------------------------------------------
static sigjmp_buf launch_jmp;
static volatile sig_atomic_t in_launch, timed_out, fault_signal;
static pthread_t launch_thread;      // a fault on another thread is not the kernel's
static std::mutex launch_mutex;      // one launch at a time: the state above is the process's
static void* volatile fault_address;

static std::string where() {
    char buf[160];
    snprintf(buf, sizeof buf, "block (%u,%u,%u), thread (%u,%u,%u)", blockIdx.x, blockIdx.y, blockIdx.z,
             cur ? cur->tid.x : 0, cur ? cur->tid.y : 0, cur ? cur->tid.z : 0);
    return buf;
}

[[noreturn]] static void fail(int code, const std::string& msg) {
    error_text = msg;
    siglongjmp(launch_jmp, code);
}

static void on_fault(int sig, siginfo_t* info, void*) {
    if (!in_launch || !pthread_equal(pthread_self(), launch_thread)) { signal(sig, SIG_DFL); raise(sig); return; }
    fault_signal = sig;
    fault_address = info->si_addr;
    siglongjmp(launch_jmp, kFault);
}

static void on_timeout_signal(int, siginfo_t*, void*) {
    if (in_launch && timed_out && pthread_equal(pthread_self(), launch_thread)) siglongjmp(launch_jmp, kTimeout);
}

#if defined(SIGRTMIN)
static int timeout_signal() { return SIGRTMIN + 7; }
#else
static int timeout_signal() { return SIGUSR2; }
#endif

// One watchdog thread for the process: it interrupts a launch past its deadline.
// Arming and disarming only wake it when it would otherwise sleep past the new
// deadline: a program making thousands of short launches costs it one wake-up
// per time limit, not two thread switches per launch.
struct Watchdog {
    using Clock = std::chrono::steady_clock;
    std::mutex m;
    std::condition_variable cv;
    bool armed = false;
    Clock::time_point deadline, waking = Clock::time_point::max();  // waking: when the thread looks next
    pthread_t target;

    Watchdog() { std::thread([this] { loop(); }).detach(); }
    void arm(double seconds) {
        std::lock_guard<std::mutex> g(m);
        armed = true;
        target = pthread_self();
        deadline = Clock::now() + std::chrono::microseconds((long long)(seconds * 1e6));
        if (deadline < waking) cv.notify_all();
    }
    void disarm() {
        std::lock_guard<std::mutex> g(m);
        armed = false;
    }
    void loop() {
        std::unique_lock<std::mutex> g(m);
        for (;;) {
            if (!armed) {
                waking = Clock::time_point::max();
                cv.wait(g);
                continue;
            }
            waking = deadline;
            if (cv.wait_until(g, waking) == std::cv_status::timeout && armed && Clock::now() >= deadline) {
                timed_out = 1;
                armed = false;
                pthread_kill(target, timeout_signal());
            }
        }
    }
};

struct SignalGuard {
    static constexpr int kSignals[4] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
    struct sigaction old[4];
    stack_t old_stack;
    SignalGuard() {
        static thread_local std::vector<char> alt(1 << 16);
        stack_t ss{};
        ss.ss_sp = alt.data();
        ss.ss_size = alt.size();
        sigaltstack(&ss, &old_stack);
        struct sigaction sa{};
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        for (int i = 0; i < 4; i++) sigaction(kSignals[i], &sa, &old[i]);
        static bool timeout_handler_installed = false;
        if (!timeout_handler_installed) {
            struct sigaction ta{};
            ta.sa_sigaction = on_timeout_signal;
            ta.sa_flags = SA_SIGINFO | SA_ONSTACK;
            sigemptyset(&ta.sa_mask);
            sigaction(timeout_signal(), &ta, nullptr);
            timeout_handler_installed = true;
        }
    }
    ~SignalGuard() {
        for (int i = 0; i < 4; i++) sigaction(kSignals[i], &old[i], nullptr);
        sigaltstack(&old_stack, nullptr);
    }
};
constexpr int SignalGuard::kSignals[4];

// ---- scheduling -------------------------------------------------------------
// A pass runs every ready fiber once, in the order of `fibers`. A fiber that blocks switches
// straight to the next ready one (one switch per thread, not two through the
// scheduler); the last of the pass switches back to the scheduler.
// The fibers are kept in the order of the pass, so that finding the next one is
// one load (a barrier's switch is a few dozen instructions: each one shows).
__attribute__((always_inline)) static inline Fiber* next_ready() {
    Fiber* const fibers = L.fibers.data();
    const int n = L.nthreads;
    int pos = L.pos;
    while (++pos < n) {
        Fiber* f = fibers + pos;
        if (f->state != kReady) continue;
        L.pos = pos;
        cur = f;
        threadIdx = f->tid;
        if (pos + 1 < n) {  // the next fiber's saved frame, from L2 while this one runs
            const char* sp = static_cast<const char*>(f[1].sp);
            __builtin_prefetch(sp);
            __builtin_prefetch(sp + 64);
        }
        return f;
    }
    L.pos = pos;
    return nullptr;
}

__attribute__((always_inline)) static inline void switch_to_next_fiber() {
    Fiber* self = cur;
    Fiber* next = next_ready();
    emu_fiber_switch(&self->sp, next ? next->sp : scheduler_sp);
}

static void release_warp_if_complete(Warp& w) {
    unsigned needed = w.wanted & w.alive;
    if (!w.arrived || (w.arrived & needed) != needed) return;
    unsigned base = unsigned(&w - L.warps.data()) * 32;
    for (unsigned lane = 0; lane < 32; lane++) {
        if (!((w.arrived >> lane) & 1)) continue;
        Fiber& f = L.fibers[L.slot[base + lane]];
        f.took_part = w.arrived;
        f.state = kReady;
    }
    w.arrived = w.wanted = 0;
    w.soft = false;
    w.parity ^= 1;
    if (analysis::enabled()) analysis::warp_released(base / 32);
}

// Lanes waiting in __activemask() while the rest of their warp is blocked
// elsewhere or has exited: those lanes were not converged with them.
static bool release_soft_rendezvous() {
    bool released = false;
    for (auto& w : L.warps) {
        if (w.soft && w.arrived) {
            w.wanted = w.arrived;
            release_warp_if_complete(w);
            released = true;
        }
    }
    return released;
}

// Bulk stores, shared -> global, in groups (include/hopper.cuh): performed at the wait that leaves fewer
// groups pending (or when the thread exits), so that shared memory written after the store and before
// its wait reaches global memory, as it may on the GPU.
static void perform_stores(Fiber* f, int through_group) {
    size_t kept = 0;
    for (auto& st : f->stores) {
        if (through_group == INT_MAX || (st.group >= 0 && st.group <= through_group)) {
            memcpy(st.dst, st.src, st.bytes);
            f->stores_done++;
        } else {
            f->stores[kept++] = st;
        }
    }
    f->stores.resize(kept);
}

// A wgmma's accumulators hold its result only after a wait that completes it: a thread that ends with one in
// flight has lost it (or stored what they held before), and on a GPU it may still read the block's shared memory.
static void check_no_wgmma_in_flight(const Fiber* f) {
    if (!f->wgmmas.empty())
        fail(kLaunchFailure, "kernel '" + std::string(L.kernel) + "', " + where() + ": the wgmma on line " +
                                 std::to_string(f->wgmmas.front().line) + " was still in flight when its thread ended: "
                                 "its accumulators hold its result only once a wgmma_wait_group() has completed it, so "
                                 "wait before reading them");
}

static void fiber_main() {
    L.thunk(L.fn, L.params);
    Fiber* f = cur;
    check_no_wgmma_in_flight(f);
    perform_stores(f, INT_MAX);
    f->state = kDone;
    L.ndone++;
    Warp& w = L.warps[f->linear / 32];
    w.alive &= ~(1u << (f->linear % 32));
    release_warp_if_complete(w);
    switch_to_next_fiber();
    __builtin_unreachable();
}

// A launch whose threads never wait for each other: they run one after the
// other, in the pass's order, on the first fiber's stack (no stack and no
// switch per thread: most of the cost of a short kernel).
static void sequential_main() {
    for (int pos = 0; pos < L.nthreads; pos++) {
        Fiber* f = &L.fibers[pos];
        cur = f;
        threadIdx = f->tid;
        L.thunk(L.fn, L.params);
        check_no_wgmma_in_flight(f);
        perform_stores(f, INT_MAX);
        f->state = kDone;
        L.ndone++;
    }
    emu_fiber_switch(&L.fibers[0].sp, scheduler_sp);
    __builtin_unreachable();
}

// Only a module that imports none of them runs sequentially; this is a safety net.
static void check_not_sequential(const char* what) {
    if (L.sequential)
        fail(kLaunchFailure, std::string("kernel '") + L.kernel + "': internal emulator error: " + what +
                                 " in a launch run without fibers");
}

static std::string describe_waits() {
    std::map<int, int> at_barrier, at_warp;
    for (auto& f : L.fibers) {
        if (f.state == kAtBarrier) at_barrier[f.line]++;
        if (f.state == kAtWarp) at_warp[f.line]++;
    }
    std::string s;
    char buf[320];
    for (auto& kv : at_barrier) { snprintf(buf, sizeof buf, "; %d thread(s) wait at __syncthreads() on line %d", kv.second, kv.first); s += buf; }
    for (auto& kv : at_warp) { snprintf(buf, sizeof buf, "; %d thread(s) wait at a warp-synchronous call on line %d", kv.second, kv.first); s += buf; }
    // Each mbarrier waited on, with the state of its phase in progress: threads wait on several at once when
    // a producer and its consumers wait for each other.
    std::map<std::tuple<int, int, const void*>, int> at_mbarrier;   // (line, parity, mbarrier) -> threads
    for (auto& f : L.fibers)
        if (f.state == kAtMbarrier) at_mbarrier[{f.line, f.mbarrier_parity, f.mbarrier}]++;
    for (auto& kv : at_mbarrier) {
        const auto& [line, parity, address] = kv.first;
        snprintf(buf, sizeof buf, "; %d thread(s) wait on an mbarrier on line %d for its phase of parity %d",
                 kv.second, line, parity);
        s += buf;
        auto it = L.mbarriers.find(address);
        if (it == L.mbarriers.end()) continue;
        const Mbarrier& m = it->second;
        if (m.tx >= 0)
            snprintf(buf, sizeof buf, " (the phase in progress has parity %d: %u of its %u arrival(s) and %lld "
                     "announced byte(s) missing)", m.phase, m.pending, m.expected, m.tx);
        else
            snprintf(buf, sizeof buf, " (the phase in progress has parity %d: %u of its %u arrival(s) missing, and "
                     "its copies brought %lld byte(s) more than mbarrier_arrive_expect_tx() announced: announce the "
                     "bytes of every copy landing on it)", m.phase, m.pending, m.expected, -m.tx);
        s += buf;
    }
    if (L.ndone) { snprintf(buf, sizeof buf, "; %d thread(s) have exited", L.ndone); s += buf; }
    return s;
}

// Every live thread is blocked: release the barrier, or explain why not.
static void resolve_barrier() {
    int alive = L.nthreads - L.ndone;
    char head[200];
    snprintf(head, sizeof head, "kernel '%s', block (%u,%u,%u): ", L.kernel, blockIdx.x, blockIdx.y, blockIdx.z);
    if (L.nbarrier != alive) {
        fail(kLaunchFailure, std::string(head) + "deadlock: no thread can go on" + describe_waits());
    }
    if (L.barrier_mixed)
        fail(kLaunchFailure, std::string(head) + "divergent barrier: threads wait at different __syncthreads()" + describe_waits());
    if (L.ndone)
        fail(kLaunchFailure, std::string(head) + "divergent barrier: __syncthreads() on line " + std::to_string(L.barrier_line) +
                                 " is not reached by every thread of the block" + describe_waits() +
                                 " (a barrier inside a branch or after an early return)");
    L.barrier_result = L.barrier_count;
    L.barrier_all = L.barrier_count == alive;
    L.barrier_any = L.barrier_count > 0;
    for (auto& f : L.fibers) f.state = kReady;
    L.nbarrier = 0;
    if (analysis::enabled()) analysis::barrier_released();
}

// A new thread's locals start as a block's shared memory does, 0xff bytes (NaN as a float, -1 as an int), not as
// what its stack held (zeros at first, then another thread's values: a result that depends on the thread
// order): a value read before it is written is NaN, in any order, and the checks say where NaNs come from.
// Only the top of the stack, where the kernel's frame lies, for speed. (A launch without fibers runs its threads
// one after another on one stack: there a local holds what the runtime's calls left.) Where the compiler knows
// -ftrivial-auto-var-init=pattern (build.py, LOCALS_PATTERN), a kernel's own variables start as its pattern
// instead, in either kind of launch; this covers what it does not initialise.
static const size_t kPoisonedStack = 4096;
static void* fresh_fiber(char* lo, size_t size, void (*entry)()) {
    const size_t poisoned = std::min(size, kPoisonedStack);
    memset(lo + size - poisoned, 0xff, poisoned);
    return fiber_init(lo, size, entry);
}

static unsigned long long next_random(unsigned long long& s) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    return s;
}

// A block's shared memory goes to the next block once its threads have ended, whatever copies into it are in
// flight: a copy no thread waited for may land in another block's tiles on a GPU.
static void check_every_copy_waited_for() {
    for (auto& [bar, m] : L.mbarriers) {
        const int line = m.copies.empty() ? m.unwaited : m.copies.front().line;
        if (!line) continue;
        const bool in_first_phase = m.completed == (m.copies.empty() ? 1 : 0);
        const std::string why = m.first_wait && in_first_phase
            ? "the wait on line " + std::to_string(m.first_wait) + " asks for the phase of parity 1, which passes at "
              "once on an mbarrier that has completed no phase yet (the phase before its first), so no thread waited "
              "for the copy's phase, of parity 0"
            : "the block's threads ended without a wait on its mbarrier";
        fail(kLaunchFailure, "kernel '" + std::string(L.kernel) + "', block (" + std::to_string(blockIdx.x) + "," +
                                 std::to_string(blockIdx.y) + "," + std::to_string(blockIdx.z) + "): the copy on line " +
                                 std::to_string(line) + " into shared memory was never waited for: " + why + ". On a "
                                 "GPU the block may end before the copy lands, and it then writes shared memory that "
                                 "the next block uses: wait for every copy the block issues, and issue only the "
                                 "copies it uses");
    }
}

static void run_block(uint3 bid) {
    blockIdx = bid;
    const int n = L.nthreads;
    if (L.mod->shared_end > L.mod->shared_begin)
        memset(L.mod->shared_begin, 0xff, size_t(L.mod->shared_end - L.mod->shared_begin));
    if (!L.dynamic_shared.empty()) memset(L.dynamic_shared.data(), 0xff, L.dynamic_shared.size());
    if (L.seed) {  // a permuted thread order exposes code that depends on the order
        for (int i = n - 1; i > 0; i--) std::swap(L.fibers[i], L.fibers[next_random(L.seed) % (i + 1)]);
        for (int i = 0; i < n; i++) L.slot[L.fibers[i].linear] = unsigned(i);
    }
    for (int i = 0; i < n; i++) {
        Fiber& f = L.fibers[i];
        if (!L.sequential)
            f.sp = fresh_fiber(stacks + i * stack_stride + page_size(), stack_size + kColourSpan - stack_colour(i), fiber_main);
        f.state = kReady;
        f.groups_committed = f.groups_done = 0;
        f.stores_done = 0;
        f.wgmmas.clear();
        f.wgmma_committed = 0;
        f.fenced_maps.clear();
    }
    if (L.sequential) L.fibers[0].sp = fresh_fiber(stacks + page_size(), stack_size + kColourSpan, sequential_main);
    for (size_t w = 0; w < L.warps.size(); w++) {
        int lanes = std::min(32, n - int(w) * 32);
        L.warps[w].alive = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
        L.warps[w].arrived = L.warps[w].wanted = 0;
        L.warps[w].soft = false;
        L.warps[w].parity = 0;
    }
    L.ndone = L.nbarrier = 0;
    L.mbarriers.clear();
    if (analysis::enabled()) analysis::begin_block(bid);
    if (L.sequential) {
        cur = &L.fibers[0];
        emu_fiber_switch(&scheduler_sp, L.fibers[0].sp);
        if (timed_out) siglongjmp(launch_jmp, kTimeout);
    }
    for (;;) {
        L.pos = -1;
        Fiber* first = next_ready();
        if (first) emu_fiber_switch(&scheduler_sp, first->sp);
        if (timed_out) siglongjmp(launch_jmp, kTimeout);
        if (first) continue;
        if (L.ndone == n) break;
        if (!release_soft_rendezvous()) resolve_barrier();
    }
    check_every_copy_waited_for();
    if (analysis::enabled()) analysis::end_block();
    cur = nullptr;
}

bool current_thread(unsigned* linear) {
    if (!cur) return false;
    *linear = cur->linear;
    return true;
}

bool on_fiber_stack(const void* p) {
    auto a = static_cast<const char*>(p);
    return stacks && a >= stacks && a < stacks + stack_stride * stack_count;
}

void fail_with_finding() { siglongjmp(launch_jmp, kFault); }

}  // namespace emu

using namespace emu;

// ---- device-side services ---------------------------------------------------
static void arrive_at_barrier(int line, int predicate) {
    check_not_sequential("__syncthreads()");
    Fiber* f = cur;
    f->state = kAtBarrier;
    f->line = line;
    if (L.nbarrier++ == 0) {
        L.barrier_line = line;
        L.barrier_mixed = false;
        L.barrier_count = 0;
    } else if (line != L.barrier_line) {
        L.barrier_mixed = true;
    }
    L.barrier_count += predicate != 0;
    switch_to_next_fiber();
}

extern "C" void __emu_syncthreads(int line) { arrive_at_barrier(line, 0); }

extern "C" int __emu_syncthreads_reduce(int line, int predicate, int op) {
    arrive_at_barrier(line, predicate);
    return op == 0 ? L.barrier_result : op == 1 ? L.barrier_all : L.barrier_any;
}

extern "C" const unsigned char* __emu_warp_exchange(int line, unsigned mask, const void* value, size_t size,
                                                    unsigned* arrived) {
    check_not_sequential("a warp-synchronous call");
    Fiber* f = cur;
    unsigned lane = f->linear % 32;
    Warp& w = L.warps[f->linear / 32];
    if (!((mask >> lane) & 1))
        fail(kLaunchFailure, "kernel '" + std::string(L.kernel) + "', " + where() + ": warp-synchronous call on line " +
                                 std::to_string(line) + " with a mask that leaves out the calling lane " + std::to_string(lane));
    f->parity = w.parity;
    memcpy(w.slots[w.parity][lane], value, size);
    f->state = kAtWarp;
    f->line = line;
    w.arrived |= 1u << lane;
    w.wanted |= mask;
    release_warp_if_complete(w);
    if (f->state != kReady) switch_to_next_fiber();
    *arrived = f->took_part;
    return &w.slots[f->parity][0][0];
}

extern "C" void __emu_syncwarp(int line, unsigned mask) {
    unsigned arrived;
    char nothing = 0;
    __emu_warp_exchange(line, mask, &nothing, 1, &arrived);
}

// ---- mbarriers and bulk copies (include/hopper.cuh) -------------------------------
// The kernel's code address that called the runtime function this is used in (for the analysis's lines).
#define CALLER_PC reinterpret_cast<uintptr_t>(__builtin_return_address(0))

static Mbarrier& mbarrier_at(int line, const void* bar, const char* what, uintptr_t pc) {
    auto it = L.mbarriers.find(bar);
    if (it == L.mbarriers.end())
        fail(kLaunchFailure, "kernel '" + std::string(L.kernel) + "', " + where() + ": " + what + " on line " +
                                 std::to_string(line) + " uses an mbarrier that mbarrier_init() has not initialised");
    if (analysis::enabled()) analysis::mbarrier_used(bar, cur->linear, pc);
    return it->second;
}

// The last arrival of a phase: its copies land, and where every announced byte has landed, the phase
// completes and the threads waiting for it go on.
static void complete_if_arrived(const void* bar, Mbarrier& m) {
    if (m.pending != 0) return;
    for (auto& c : m.copies) {
        memcpy(c.dst, c.box.empty() ? c.src : c.box.data(), c.bytes);
        m.tx -= c.bytes;
        if (!m.unwaited) m.unwaited = c.line;
    }
    m.copies.clear();
    if (m.tx != 0) return;
    if (analysis::enabled()) analysis::mbarrier_completed(bar);
    for (auto& f : L.fibers)
        if (f.state == kAtMbarrier && f.mbarrier == bar && f.mbarrier_parity == m.phase) {
            f.state = kReady;
            m.unwaited = 0;
        }
    m.phase ^= 1;
    m.completed++;
    m.pending = m.expected;
}

extern "C" void __emu_mbarrier_init(int line, void* bar, unsigned count) {
    if (count == 0)
        fail(kLaunchFailure, "kernel '" + std::string(L.kernel) + "', " + where() + ": mbarrier_init() on line " +
                                 std::to_string(line) + " with an arrival count of 0");
    Mbarrier& m = L.mbarriers[bar];
    m = Mbarrier();
    m.expected = m.pending = count;
    if (analysis::enabled()) analysis::mbarrier_init(bar, cur->linear, CALLER_PC);
}

extern "C" void __emu_mbarrier_arrive(int line, void* bar, long long tx_bytes) {
    check_not_sequential("an mbarrier arrival");
    Mbarrier& m = mbarrier_at(line, bar, "an arrival", CALLER_PC);
    m.tx += tx_bytes;
    if (m.pending == 0)
        fail(kLaunchFailure, "kernel '" + std::string(L.kernel) + "', " + where() + ": an arrival on line " +
                                 std::to_string(line) + " at an mbarrier whose phase has all its arrivals");
    m.pending--;
    if (analysis::enabled()) analysis::mbarrier_arrive(bar, cur->linear);
    complete_if_arrived(bar, m);
}

extern "C" void __emu_mbarrier_wait(int line, void* bar, unsigned parity) {
    check_not_sequential("an mbarrier wait");
    Mbarrier& m = mbarrier_at(line, bar, "a wait", CALLER_PC);
    if (m.phase != int(parity & 1)) {                     // it waits for the phase that completed last
        m.unwaited = 0;
        if (!m.completed) m.first_wait = line;
    } else {                                              // that phase is in progress: wait for it
        Fiber* f = cur;
        f->state = kAtMbarrier;
        f->line = line;
        f->mbarrier_parity = int(parity & 1);
        f->mbarrier = bar;
        switch_to_next_fiber();
    }
    if (analysis::enabled()) analysis::mbarrier_passed(bar, parity, cur->linear);
}

static void check_shared_range(const std::string& head, const void* shared, size_t bytes, bool read) {
    const uintptr_t d = reinterpret_cast<uintptr_t>(shared);
    const uintptr_t lo = reinterpret_cast<uintptr_t>(L.mod->shared_begin), hi = reinterpret_cast<uintptr_t>(L.mod->shared_end);
    const uintptr_t dlo = reinterpret_cast<uintptr_t>(L.dynamic_shared.data());
    const bool in_static = d >= lo && d + bytes <= hi;
    const bool in_dynamic = !L.dynamic_shared.empty() && d >= dlo && d + bytes <= dlo + L.dynamic_shared.size();
    if (!in_static && !in_dynamic)
        fail(kLaunchFailure, head + (read ? "reads " : "writes ") + std::to_string(bytes) +
                                 " bytes that do not all lie in the block's shared memory");
}

// A bulk copy checks no bounds, on the GPU either: its global side must lie inside one device allocation
// and its shared side inside the block's shared memory, or the kernel is wrong (it would read or
// overwrite whatever lies there).
static void check_bulk_ranges(int line, const void* global, const void* shared, unsigned bytes, bool store) {
    const uintptr_t g = reinterpret_cast<uintptr_t>(global), d = reinterpret_cast<uintptr_t>(shared);
    const std::string head = "kernel '" + std::string(L.kernel) + "', " + where() + ": the bulk copy on line " +
                             std::to_string(line) + " ";
    const std::string moves = (store ? "writes " : "reads ") + std::to_string(bytes) + (store ? " bytes to " : " bytes from ");
    if (bytes == 0 || bytes % 16 || g % 16 || d % 16)
        fail(kLaunchFailure, head + "needs a size and addresses that are multiples of 16 bytes");
    const uintptr_t* b = L.buffers;
    size_t i = 0;
    while (i < L.nbuffers && !(g >= b[2 * i] && g < b[2 * i] + b[2 * i + 1])) i++;
    if (i == L.nbuffers)
        fail(kLaunchFailure, head + moves + "an address in no device allocation (a tile past the edge of the matrix?)");
    const uintptr_t end = b[2 * i] + b[2 * i + 1];
    if (g + bytes > end)
        fail(kLaunchFailure, head + moves + "global memory, " + std::to_string(g + bytes - end) +
                                 " of them past the end of the allocation it starts in: a tile past the edge of the "
                                 "matrix? A bulk copy checks no bounds: copy only what lies inside");
    check_shared_range(head, shared, bytes, store);
}

extern "C" void __emu_bulk_copy(int line, void* dst, const void* src, unsigned bytes, void* bar) {
    Mbarrier& m = mbarrier_at(line, bar, "a bulk copy", CALLER_PC);
    check_bulk_ranges(line, src, dst, bytes, false);
    if (analysis::enabled())
        analysis::bulk_copy(dst, bytes, bar, cur->linear, CALLER_PC);
    m.copies.push_back({dst, src, bytes, {}, line});
    complete_if_arrived(bar, m);      // issued after the phase's last arrival: it lands now
}

// A tensor copy (TMA): a box of a row-major matrix that a tensor map describes (the emulator's encoding,
// grader/emulator/tensor_map.py), its elements outside the matrix landing as zeros, as on the GPU.
static const uint64_t kTensorMapMagic = 0x3250414d54554d45ull;     // "EMUTMAP2"

extern "C" void __emu_fence_proxy_tensormap(const void* map) {
    std::vector<const void*>& fenced = cur->fenced_maps;
    if (std::find(fenced.begin(), fenced.end(), map) == fenced.end()) fenced.push_back(map);
}

extern "C" void __emu_tma_load_2d(int line, void* dst, const void* map, int x, int y, void* bar) {
    Mbarrier& m = mbarrier_at(line, bar, "a tensor copy", CALLER_PC);
    const std::string head = "kernel '" + std::string(L.kernel) + "', " + where() + ": the tensor copy on line " +
                             std::to_string(line) + " ";
    const uint64_t* w = static_cast<const uint64_t*>(map);
    if (w[0] != kTensorMapMagic)
        fail(kLaunchFailure, head + "reads a tensor map that tensor_map_2d() did not make (pass the map itself, by "
                                    "value: const __grid_constant__ TensorMap map)");
    const std::vector<const void*>& fenced = cur->fenced_maps;
    if (std::find(fenced.begin(), fenced.end(), map) == fenced.end())
        fail(kLaunchFailure, head + "reads a tensor map its thread has not fenced: fence_proxy_tensormap(&map) once, "
                                    "before the thread's first copy through it (the host wrote the map; the copies "
                                    "read it through the tensor-map proxy, which may hold an older map at that address)");
    const uint64_t base = w[1], esize = w[2], width = w[3], height = w[4], stride = w[5], bw = w[6], bh = w[7];
    const uint64_t swizzle = w[8];
    const size_t bytes = size_t(bw * bh * esize);
    if (swizzle && bw * esize != 128)
        fail(kLaunchFailure, head + "reads a tensor map with a 128-byte swizzle whose box rows are not 128 bytes");
    const uintptr_t align = swizzle ? 1024 : 128;
    if (reinterpret_cast<uintptr_t>(dst) % align)
        fail(kLaunchFailure, head + "writes to shared memory at an address that is not a multiple of " +
                                    std::to_string(align) + " bytes (__align__(" + std::to_string(align) +
                                    ") on the array" + (swizzle ? ": a swizzled box starts a swizzle pattern)" : ")"));
    check_shared_range(head, dst, bytes, false);
    const uintptr_t* b = L.buffers;
    size_t i = 0;
    while (i < L.nbuffers && !(base >= b[2 * i] && base < b[2 * i] + b[2 * i + 1])) i++;
    if (i == L.nbuffers || base + (height - 1) * stride + width * esize > b[2 * i] + b[2 * i + 1])
        fail(kLaunchFailure, head + "reads a tensor map whose matrix does not lie in one device allocation (freed, "
                                    "or made with a larger shape than the array's?)");
    std::vector<unsigned char> box(bytes, 0);
    const long long c0 = std::max<long long>(x, 0), c1 = std::min<long long>((long long)x + (long long)bw, (long long)width);
    for (uint64_t r = 0; r < bh && c1 > c0; r++) {
        const long long row = (long long)y + (long long)r;
        if (row < 0 || row >= (long long)height) continue;
        memcpy(&box[(r * bw + uint64_t(c0 - x)) * esize],
               reinterpret_cast<const unsigned char*>(base + uint64_t(row) * stride + uint64_t(c0) * esize),
               size_t(uint64_t(c1 - c0) * esize));
    }
    if (swizzle) {      // 128-byte rows: chunk c of row r lands at chunk c ^ (r % 8)
        std::vector<unsigned char> plain(box);
        for (size_t r = 0; r < bh; r++)
            for (size_t c = 0; c < 8; c++)
                memcpy(&box[r * 128 + ((c ^ (r % 8)) * 16)], &plain[r * 128 + c * 16], 16);
    }
    if (analysis::enabled())
        analysis::bulk_copy(dst, unsigned(bytes), bar, cur->linear, CALLER_PC);
    m.copies.push_back({dst, nullptr, unsigned(bytes), std::move(box), line});
    complete_if_arrived(bar, m);
}

extern "C" void __emu_bulk_store(int line, void* dst, const void* src, unsigned bytes) {
    check_bulk_ranges(line, dst, src, bytes, true);
    Fiber* f = cur;
    if (analysis::enabled())
        analysis::bulk_store(src, bytes, f->linear, unsigned(f->stores_done + f->stores.size()), CALLER_PC);
    f->stores.push_back({dst, src, bytes, -1});
}

extern "C" void __emu_bulk_commit(void) {
    Fiber* f = cur;
    for (auto& st : f->stores)
        if (st.group < 0) st.group = f->groups_committed;
    f->groups_committed++;       // a group with no store too, as on the GPU
}

extern "C" void __emu_bulk_wait(int pending) {
    Fiber* f = cur;
    const int through = f->groups_committed - std::max(pending, 0) - 1;
    if (through >= f->groups_done) {
        perform_stores(f, through);
        f->groups_done = through + 1;
    }
    if (analysis::enabled()) analysis::bulk_store_waited(f->linear, f->stores_done);
}

extern "C" void __emu_fence_proxy_async(void) {
    if (analysis::enabled()) analysis::proxy_fence(cur->linear);
}

// ---- wgmma (include/hopper.cuh) ---------------------------------------------------------
// A warpgroup's D (64 x n) = A (64 x 16) B (16 x n) + D, bf16 operands in shared memory by descriptor, K-major
// or, for B, N-major (wgmma_operand), FP32 accumulators in registers: thread t of the warpgroup holds, in its
// register i, D[16 (t / 32) + (t % 32) / 4 + 8 ((i / 2) % 2)][2 (t % 4) + i % 2 + 8 (i / 4)], as on the GPU. Each thread's part is computed
// at the wait that completes its group, from shared memory as it is then (the latest a GPU may read it), and
// until then its accumulators hold NaN: a GPU's hold no result before that wait either.
// A descriptor's address: an offset into the block's shared memory, the static arrays first, the dynamic ones
// from the next 1 KiB boundary after them.
static uintptr_t shared_window_dynamic() {
    return (uintptr_t(L.mod->shared_end - L.mod->shared_begin) + 1023) / 1024 * 1024;
}

extern "C" unsigned long long __emu_wgmma_descriptor(int line, const void* tile, unsigned lbo, unsigned sbo, int swizzle128) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(tile);
    const uintptr_t lo = reinterpret_cast<uintptr_t>(L.mod->shared_begin), hi = reinterpret_cast<uintptr_t>(L.mod->shared_end);
    const uintptr_t dlo = reinterpret_cast<uintptr_t>(L.dynamic_shared.data());
    const std::string head = "kernel '" + std::string(L.kernel) + "', " + where() + ": wgmma_descriptor() on line " +
                             std::to_string(line) + " ";
    uintptr_t offset;
    if (a >= lo && a < hi) offset = a - lo;
    else if (!L.dynamic_shared.empty() && a >= dlo && a < dlo + L.dynamic_shared.size()) offset = shared_window_dynamic() + (a - dlo);
    else fail(kLaunchFailure, head + "is given an address outside the block's shared memory");
    if (a % 16 || lbo % 16 || sbo % 16)
        fail(kLaunchFailure, head + "needs an address, an LBO and an SBO that are multiples of 16 bytes");
    return ((offset >> 4) & 0x3FFF) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) | (uint64_t((sbo >> 4) & 0x3FFF) << 32) |
           (swizzle128 ? uint64_t(1) << 62 : 0);
}

// Row `row` (of A, or column of B), element k of an operand: K-major, without swizzle in core matrices of 8
// rows x 16 bytes, with the 128-byte swizzle in rows of 128 bytes, 8 to an SBO; N-major (B), 16-byte chunks of 8
// columns at one k, without swizzle 8 values of k in a core matrix, LBO along K and SBO along N (as an H100 reads
// them: tests/test_wgmma_layout.py), with the swizzle rows of 64 columns at one k, 8 to an SBO, LBO between
// blocks of 64 columns. Swizzled, each 16-byte chunk moves by its address's bits 7 to 9 (the row's index in its
// 1024-byte atom), as the tensor copy with that swizzle lays them.
static const unsigned char* wgmma_operand(const Fiber::Wgmma& op, uint64_t desc, int row, int k, bool nmajor,
                                          const char* which) {
    const uintptr_t offset = uintptr_t(desc & 0x3FFF) << 4, lbo = uintptr_t((desc >> 16) & 0x3FFF) << 4,
                    sbo = uintptr_t((desc >> 32) & 0x3FFF) << 4;
    const bool swizzled = (desc >> 62) == 1;
    const uintptr_t r = uintptr_t(row), kk = uintptr_t(k);
    const uintptr_t at = offset + (!nmajor ? (r / 8) * sbo + (swizzled ? (r % 8) * 128 + kk * 2
                                                                      : (kk / 8) * lbo + (r % 8) * 16 + (kk % 8) * 2)
                                  : swizzled ? (r / 64) * lbo + (kk / 8) * sbo + (kk % 8) * 128 + (r % 64) * 2
                                             : (r / 8) * sbo + (kk / 8) * lbo + (kk % 8) * 16 + (r % 8) * 2);
    const uintptr_t chunk = at - at % 16;
    const size_t fixed = size_t(L.mod->shared_end - L.mod->shared_begin), dyn = shared_window_dynamic();
    const unsigned char* base = nullptr;
    if (chunk + 16 <= fixed) base = reinterpret_cast<const unsigned char*>(L.mod->shared_begin) + chunk;
    else if (chunk >= dyn && chunk - dyn + 16 <= L.dynamic_shared.size()) base = L.dynamic_shared.data() + (chunk - dyn);
    if (base != nullptr && swizzled) {
        const uintptr_t b = reinterpret_cast<uintptr_t>(base);
        base = reinterpret_cast<const unsigned char*>(b ^ (((b >> 7) & 7) << 4));
    }
    if (base != nullptr) return base + at % 16;
    fail(kLaunchFailure, "kernel '" + std::string(L.kernel) + "', " + where() + ": the wgmma on line " + std::to_string(op.line) +
                             " reads its " + which + " operand's " + (nmajor ? "column " : "row ") + std::to_string(row) +
                             ", k " + std::to_string(k) + " outside the block's shared memory (its descriptor's address, LBO or SBO?)");
}

static float bf16_at(const unsigned char* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    const uint32_t bits = uint32_t(h) << 16;
    float x;
    memcpy(&x, &bits, 4);
    return x;
}

// What a thread's part of a wgmma reads, its rows of A and its columns of B (of an N-major B, its values of k),
// 16-byte chunks, for the analysis: at the issue and at the wait, the two ends of the time a GPU may read them.
static void analyse_wgmma_reads(const Fiber* f, const Fiber::Wgmma& op) {
    if (!analysis::enabled()) return;
    const int t = int(f->linear % 128), warp = t / 32, lane = t % 32;
    for (int half = 0; half < 2; half++) {
        for (int r = 0; r < 2; r++)
            analysis::async_read(wgmma_operand(op, op.a, 16 * warp + lane / 4 + 8 * r, 8 * half, false, "A"), 16,
                                 f->linear, op.pc);
        for (int j = 0; j < op.n / 8; j++)
            for (int c = 0; c < 2; c++) {
                const unsigned char* chunk = op.nmajor_b
                    ? wgmma_operand(op, op.b, 8 * j, 8 * half + 2 * (lane % 4) + c, true, "B")
                    : wgmma_operand(op, op.b, 8 * j + 2 * (lane % 4) + c, 8 * half, false, "B");
                analysis::async_read(chunk, 16, f->linear, op.pc);
            }
    }
}

// The at-th of a thread's wgmmas in flight: its result goes to the accumulators, or, where a later wgmma in
// flight uses the same ones, to that wgmma if it adds to it (the accumulators hold no result until the last).
static void complete_wgmma(Fiber* f, size_t at) {
    const Fiber::Wgmma& op = f->wgmmas[at];
    analyse_wgmma_reads(f, op);
    const int t = int(f->linear % 128), warp = t / 32, lane = t % 32;
    std::vector<float> r(size_t(op.n / 2));
    for (int i = 0; i < op.n / 2; i++) {
        const int row = 16 * warp + lane / 4 + 8 * ((i / 2) % 2), col = 2 * (lane % 4) + i % 2 + 8 * (i / 4);
        float sum = size_t(i) < op.c.size() ? op.c[size_t(i)] : 0.0f;
        for (int k = 0; k < 16; k++)
            sum += bf16_at(wgmma_operand(op, op.a, row, k, false, "A")) *
                   bf16_at(wgmma_operand(op, op.b, col, k, op.nmajor_b, "B"));
        r[size_t(i)] = sum;
    }
    for (size_t j = at + 1; j < f->wgmmas.size(); j++) {
        Fiber::Wgmma& next = f->wgmmas[j];
        if (next.d != op.d) continue;
        if (next.chained) {
            next.c = r;
            next.c.resize(size_t(next.n / 2), std::numeric_limits<float>::quiet_NaN());
        }
        return;
    }
    std::copy(r.begin(), r.end(), op.d);
}

// What a wgmma's accumulators hold until the wait that completes it: a NaN whose payload no arithmetic makes,
// so that the grader can name a read before the wait (grader.kernels.sgemm.WGMMA_IN_FLIGHT_BITS).
static float in_flight_nan() {
    const uint32_t bits = 0x7FC0A51Cu;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

extern "C" void __emu_wgmma(int line, float* d, int n, unsigned long long a, unsigned long long b, int scale_d,
                            int nmajor_b) {
    Fiber* f = cur;
    const std::string head = "kernel '" + std::string(L.kernel) + "', " + where() + ": the wgmma on line " + std::to_string(line) + " ";
    if (int(f->linear / 128) * 128 + 128 > L.nthreads)
        fail(kLaunchFailure, head + "is issued by a thread whose warpgroup is not whole: a wgmma is a warpgroup's, "
                                    "128 threads (4 warps) from a multiple of 128");
    if ((a >> 62) > 1 || (b >> 62) > 1)
        fail(kLaunchFailure, head + "has a descriptor with a swizzle the course's header does not make (none, or 128 bytes)");
    const bool in_flight = std::any_of(f->wgmmas.begin(), f->wgmmas.end(), [d](const Fiber::Wgmma& w) { return w.d == d; });
    Fiber::Wgmma op{d, n, a, b, nmajor_b != 0, {}, scale_d && in_flight, -1, line, CALLER_PC};
    if (scale_d && !in_flight) op.c.assign(d, d + n / 2);
    std::fill(d, d + n / 2, in_flight_nan());
    analyse_wgmma_reads(f, op);
    f->wgmmas.push_back(std::move(op));
}

extern "C" void __emu_wgmma_commit(void) {
    Fiber* f = cur;
    for (auto& op : f->wgmmas)
        if (op.group < 0) op.group = f->wgmma_committed;
    f->wgmma_committed++;
}

extern "C" void __emu_wgmma_wait(int pending) {
    Fiber* f = cur;
    const int through = f->wgmma_committed - std::max(pending, 0) - 1;
    size_t kept = 0;
    for (size_t i = 0; i < f->wgmmas.size(); i++) {
        if (f->wgmmas[i].group >= 0 && f->wgmmas[i].group <= through) complete_wgmma(f, i);
        else if (kept++ != i) f->wgmmas[kept - 1] = std::move(f->wgmmas[i]);   // a vector moved onto itself empties
    }
    f->wgmmas.resize(kept);
}

extern "C" unsigned __emu_lane_id(void) { return cur->linear % 32; }
extern "C" unsigned __emu_activemask(void) {
    check_not_sequential("__activemask()");
    Fiber* f = cur;
    Warp& w = L.warps[f->linear / 32];
    f->state = kAtWarp;
    f->line = 0;
    w.arrived |= 1u << (f->linear % 32);
    w.wanted |= w.alive;
    w.soft = true;
    release_warp_if_complete(w);
    if (f->state != kReady) switch_to_next_fiber();
    return f->took_part;
}

extern "C" int __emu_printf(const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (output_text.size() < kOutputLimit) output_text.append(buf, std::min<size_t>(n < 0 ? 0 : n, sizeof buf - 1));
    return n;
}

extern "C" void __emu_trap(const char* why, const char* file, int line) {
    fail(kTrap, "kernel '" + std::string(L.kernel) + "', " + where() + ": " + why + " (" + file + ":" + std::to_string(line) + ")");
}

extern "C" long long __emu_clock(void) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- atomics: a fiber is never interrupted inside one -----------------------
#define EMU_ATOMIC(T)                                                     \
    T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }            \
    T atomicExch(T* p, T v) { T o = *p; *p = v; return o; }
EMU_ATOMIC(int) EMU_ATOMIC(unsigned int) EMU_ATOMIC(unsigned long long) EMU_ATOMIC(float) EMU_ATOMIC(double)
#define EMU_ATOMIC_INT(T)                                                 \
    T atomicSub(T* p, T v) { T o = *p; *p = o - v; return o; }            \
    T atomicMin(T* p, T v) { T o = *p; *p = v < o ? v : o; return o; }    \
    T atomicMax(T* p, T v) { T o = *p; *p = v > o ? v : o; return o; }    \
    T atomicAnd(T* p, T v) { T o = *p; *p = o & v; return o; }            \
    T atomicOr(T* p, T v) { T o = *p; *p = o | v; return o; }             \
    T atomicXor(T* p, T v) { T o = *p; *p = o ^ v; return o; }            \
    T atomicCAS(T* p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }
EMU_ATOMIC_INT(int) EMU_ATOMIC_INT(unsigned int) EMU_ATOMIC_INT(unsigned long long) EMU_ATOMIC_INT(long long)
unsigned int atomicInc(unsigned int* p, unsigned int v) { unsigned o = *p; *p = o >= v ? 0 : o + 1; return o; }
unsigned int atomicDec(unsigned int* p, unsigned int v) { unsigned o = *p; *p = (o == 0 || o > v) ? v : o - 1; return o; }
unsigned short atomicCAS(unsigned short* p, unsigned short c, unsigned short v) {
    unsigned short o = *p; if (o == c) *p = v; return o;
}

// ---- host API (called through ctypes) ---------------------------------------
extern "C" const char* emu_last_error(void) { return error_text.c_str(); }

extern "C" size_t emu_take_output(char* buf, size_t cap) {
    size_t n = std::min(cap, output_text.size());
    memcpy(buf, output_text.data(), n);
    output_text.erase(0, n);
    return n;
}
extern "C" size_t emu_pending_output(void) { return output_text.size(); }

extern "C" int emu_launch(const ModuleInfo* mod, int kernel, const unsigned char* params, size_t params_size,
                          const unsigned* grid, const unsigned* block, size_t dynamic_shared, double timeout_s,
                          unsigned long long seed, const uintptr_t* buffers, size_t nbuffers, int sequential) {
    static Watchdog& watchdog = *new Watchdog;  // never destroyed: its thread outlives exit handlers
    std::lock_guard<std::mutex> serial(launch_mutex);
    launch_thread = pthread_self();
    const KernelEntry& k = mod->kernels[kernel];
    int n = int(block[0] * block[1] * block[2]);
    if (!ensure_stacks(sequential ? 1 : size_t(n))) { error_text = "cannot allocate fiber stacks"; return kInvalid; }
    L.thunk = k.thunk;
    L.fn = k.fn;
    L.params = params;
    L.mod = mod;
    L.kernel = k.name;
    L.nthreads = n;
    L.seed = seed;
    L.buffers = buffers;
    L.nbuffers = nbuffers;
    L.sequential = sequential != 0;
    L.fibers.assign(size_t(n), Fiber{});
    L.warps.assign(size_t((n + 31) / 32), Warp{});
    L.slot.resize(size_t(n));
    for (int i = 0; i < n; i++) {
        Fiber& f = L.fibers[i];
        f.linear = unsigned(i);
        f.tid = uint3{unsigned(i) % block[0], (unsigned(i) / block[0]) % block[1], unsigned(i) / (block[0] * block[1])};
        L.slot[i] = unsigned(i);
    }
    L.dynamic_shared.assign(dynamic_shared, 0);
    __emu_dynamic_shared = L.dynamic_shared.empty() ? nullptr : L.dynamic_shared.data();
    blockDim = dim3(block[0], block[1], block[2]);
    gridDim = dim3(grid[0], grid[1], grid[2]);
    error_text.clear();
    if (analysis::enabled())
        analysis::begin_launch(analysis::LaunchRanges{mod->shared_begin, mod->shared_end, __emu_dynamic_shared,
                                                      dynamic_shared, params, params_size, k.fn, buffers, nbuffers,
                                                      L.warps.data(), L.warps.size() * sizeof(Warp)},
                               n);

    SignalGuard signals;
    timed_out = 0;
    fault_signal = 0;
    cur = nullptr;
    int code = sigsetjmp(launch_jmp, 1);
    if (code == 0) {
        in_launch = 1;
        if (timeout_s > 0) watchdog.arm(timeout_s);
        for (unsigned z = 0; z < grid[2]; z++)
            for (unsigned y = 0; y < grid[1]; y++)
                for (unsigned x = 0; x < grid[0]; x++) run_block(uint3{x, y, z});
    }
    in_launch = 0;
    watchdog.disarm();
    char buf[512];
    if (code == kTimeout) {
        snprintf(buf, sizeof buf, "kernel '%s' ran longer than the time limit of %.3g s (%s): an endless loop?", k.name,
                 timeout_s, cur ? where().c_str() : "between threads");
        error_text = buf;
    } else if (code == kFault && fault_signal == 0) {
        error_text = "analysis finding";  // grader/emulator/analysis.py reads the findings
    } else if (code == kFault) {
        const char* what = fault_signal == SIGFPE ? "arithmetic fault (integer division by zero?)"
                         : fault_signal == SIGILL ? "illegal instruction"
                         : in_guard_page(fault_address) ? "stack overflow (local arrays too large, or deep recursion)"
                         // x86 reports a misaligned 16-byte vector access (or a non-canonical address) with no address
                         : fault_address == nullptr ? "misaligned or invalid address (the CPU gives no address: most "
                                                      "often a float4 or float2 access at an address that is not a "
                                                      "multiple of its size)"
                                                    : "illegal memory access";
        if (fault_address == nullptr && fault_signal == SIGSEGV)
            snprintf(buf, sizeof buf, "kernel '%s', %s: %s", k.name, cur ? where().c_str() : "?", what);
        else
            snprintf(buf, sizeof buf, "kernel '%s', %s: %s at address %p", k.name, cur ? where().c_str() : "?", what,
                     fault_address);
        error_text = buf;
    }
    cur = nullptr;
    return code;
}
