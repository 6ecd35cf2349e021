// Analysis mode: kernels built with GCC's address-sanitizer instrumentation
// call a hook before every load and store (analysis.cpp). Shared-memory
// accesses are grouped into warp requests for the bank-conflict rule and
// checked for races against a shadow of shared memory; global accesses are
// checked against the launch's buffers and for alignment, and grouped into
// warp requests for the 32-byte sectors they touch (coalescing).
#pragma once
#include <cstddef>
#include <cstdint>

#include "emu_abi.h"

namespace emu {
namespace analysis {

// What the scheduler tells the analysis (runtime.cpp calls these).
struct LaunchRanges {
    char* shared_lo;
    char* shared_hi;
    unsigned char* dynamic_lo;
    size_t dynamic_size;
    const unsigned char* params;
    size_t params_size;
    const void* module_fn;     // any function of the kernel's module
    const uintptr_t* buffers;  // sorted (start, size) pairs of device allocations
    size_t nbuffers;
    const void* warp_slots;
    size_t warp_slots_size;
};

bool enabled();
void begin_launch(const LaunchRanges& r, int nthreads);
void begin_block(uint3 block);
void end_block();
void barrier_released();
void warp_released(unsigned warp);
// The asynchronous proxy (include/hopper.cuh): mbarriers order threads, bulk copies write shared memory.
void mbarrier_init(const void* bar, unsigned tid, uintptr_t pc);
void mbarrier_used(const void* bar, unsigned tid, uintptr_t pc);
void mbarrier_arrive(const void* bar, unsigned tid);
void mbarrier_completed(const void* bar);
void mbarrier_passed(const void* bar, unsigned parity, unsigned tid);
void bulk_copy(const void* dst, unsigned bytes, const void* bar, unsigned tid, uintptr_t pc);
void bulk_store(const void* src, unsigned bytes, unsigned tid, unsigned seq, uintptr_t pc);
void bulk_store_waited(unsigned tid, unsigned stores_done);
void proxy_fence(unsigned tid);
void async_read(const void* p, unsigned bytes, unsigned tid, uintptr_t pc);

}  // namespace analysis

// What the analysis needs from the scheduler.
bool current_thread(unsigned* linear);  // false outside a kernel
bool on_fiber_stack(const void* p);
[[noreturn]] void fail_with_finding();

}  // namespace emu

// ---- results, read by grader/emulator/analysis.py through ctypes ----------
extern "C" {
struct EmuSiteStats {
    uintptr_t pc;
    int store;
    int size;
    unsigned long long requests, wavefronts, ideal_wavefronts;
    int max_ways;
    int worst_conflicts;
    unsigned worst_lanes;
    unsigned worst_warp;
    uint3 worst_block;
    uintptr_t worst_addr[32];
};
// One global-memory access site (load or store), as Nsight Compute counts it:
// l1tex__t_requests_pipe_lsu_mem_global_op_{ld,st} and ..._t_sectors_...
struct EmuGlobalStats {
    uintptr_t pc;
    int store;
    int size;
    long long buffer;                  // the launch buffer of its first access (index, as in EmuFinding)
    unsigned long long requests;
    unsigned long long sectors;        // distinct 32-byte sectors, summed over requests
    unsigned long long ideal_sectors;  // what the distinct bytes of each request would fill, packed
    unsigned long long bytes;          // bytes the lanes asked for (lanes x size)
    int worst_excess;                  // sectors - ideal of the worst request
    unsigned worst_lanes;
    unsigned worst_warp;
    uint3 worst_block;
    uintptr_t worst_addr[32];
};
struct EmuRace {
    // 0 read after write, 1 write after read, 2 write after write; 3 a bulk copy (b) over an access (a) not
    // ordered before it; 4 an access (b) to what a bulk copy (a) fills, before a wait for its phase;
    // 5 a store (a) a bulk copy (b) reads or overwrites, with no proxy fence between; 6 a write (b) to what
    // a bulk store (a) reads, unordered with its wait; 7 a bulk store (b) of a write (a) not ordered before it;
    // 8 a use (b) of an mbarrier whose initialisation (a) is not ordered before it; 9 a store (a) a wgmma (b)
    // reads, with no proxy fence between; 10 a write (b) to what a wgmma (a) reads, before its wait
    int kind;
    uintptr_t pc_a, pc_b;
    unsigned tid_a, tid_b;  // linear thread ids in the block
    uint3 block;
    uintptr_t addr;
    unsigned long long count;
};
struct EmuFinding {
    int kind;  // 0 out of bounds, 1 misaligned
    int store;
    int size;
    uintptr_t pc;
    unsigned tid;  // linear thread id in the block
    uint3 block;
    uintptr_t addr;
    long long buffer;    // index into the buffers passed to the launch, -1 none
    long long offset;    // from that buffer's start
    int shared;
};

// The bank rule, for one warp request: `addr` holds 32 byte offsets in shared
// memory (only the lanes set in `lanes` count), each access `size` bytes.
// Returns the wavefronts it takes; *ideal (one per phase with active lanes)
// and *max_ways (the most distinct words one bank serves in a phase) when not null.
unsigned long long emu_bank_wavefronts(const uintptr_t* addr, unsigned lanes, int size,
                                       unsigned long long* ideal, int* max_ways);

// The sector rule, for one warp request to global memory: the distinct 32-byte
// sectors the lanes in `lanes` touch, each reading or writing `size` bytes at
// addr[lane]; *ideal (the sectors the request's distinct bytes would fill if
// they were contiguous and aligned) when not null.
unsigned emu_global_sectors(const uintptr_t* addr, unsigned lanes, int size, unsigned* ideal);
}
