// The course's Hopper header, as the emulator runs it (the GPU's own, inline PTX
// for sm_90, is pycuda-include/hopper.cuh; both declare the same calls):
//
//   __shared__ uint64_t full;                 // an mbarrier: 8 bytes of shared memory
//   mbarrier_init(&full, count);              // count arrivals complete a phase
//   fence_mbarrier_init();                    // then __syncthreads() before other threads use it
//   mbarrier_arrive(&full);                   // one arrival
//   mbarrier_arrive_expect_tx(&full, bytes);  // one arrival, announcing `bytes` that bulk copies bring
//   bulk_copy_g2s(dst, src, bytes, &full);    // global -> shared, 16-byte multiples, landing on `full`
//   mbarrier_wait_parity(&full, parity);      // until the phase of that parity (0, 1, 0, ...) completes
//   bulk_copy_s2g(dst, src, bytes);           // shared -> global, 16-byte multiples, in this thread's next group
//   bulk_commit_group();                      // the bulk stores issued since the last commit form a group
//   bulk_wait_group_read(n);                  // until at most n groups still read shared memory (n: a constant)
//   fence_proxy_async();                      // this thread's shared stores, before a bulk copy reads or overwrites them
//   fence_proxy_tensormap(&map);              // once per thread, before its first tensor copy through `map`
//   tma_load_2d(dst, &map, x, y, &full);      // a box of a matrix (tensor map from the host: grader.kernels.
//                                             // tensor_map.tensor_map_2d) at column x, row y, landing on `full`;
//                                             // its elements outside the matrix land as zeros; dst 128-byte aligned
//   uint64_t a = wgmma_descriptor(tile, lbo, sbo);  // a bf16 operand in shared memory, no swizzle: core
//                                             // matrices of 8 rows x 16 bytes (8 elements of K; for an N-major
//                                             // B 8 columns at one k), LBO bytes between core matrices along K,
//                                             // SBO along M (A) or N (B); tile 16-byte aligned
//   uint64_t a = wgmma_descriptor_swizzle128(tile, lbo, sbo);  // the same, laid out as a tensor copy with
//                                             // swizzle=128 lands it: rows of 128 bytes (64 elements of K; for an
//                                             // N-major B 64 columns at one k), SBO bytes between groups of 8 rows
//                                             // (1024 when dense); LBO between blocks of 64 columns of an N-major
//                                             // B (ignored otherwise); a slice of K 16 wide starts 32 bytes further
//                                             // along the rows (tile + 16 s), or 16 rows further for an N-major B
//   wgmma_fence();                            // before a warpgroup's first wgmma on accumulators it wrote
//   wgmma_m64n64k16_bf16(d, a, b, scale_d);   // D (64 x 64) = A (64 x 16) B (16 x 64) + (scale_d ? D : 0), by the
//                                             // warpgroup's 128 threads, each with float d[32] (n8 ... n256: d[n / 2]);
//                                             // B K-major (N x K); wgmma_m64n64k16_bf16_nmajor: B N-major (K x N)
//   wgmma_commit_group();                     // the wgmmas issued since the last commit form a group
//   wgmma_wait_group(n);                      // until at most n groups are pending (n: a constant); d is
//                                             // the result only after it
//
// Here a phase completes when its last arrival arrives: its copies land then, so shared memory read
// before the wait holds what was there before (the poison of a new block), as on a GPU where the copy
// has not landed yet; a bulk store reads shared memory at its wait (or when its thread exits), so
// what is written there before the wait may reach global memory. A wait no arrival can end is reported
// as a deadlock, with its line. The analysis
// build orders threads by their arrivals and waits (analysis.cpp): a copy over shared memory another
// thread accessed unordered, or an access to what a copy fills before a wait for its phase, is a race.
#pragma once
#include <cstdint>

extern "C" {
void __emu_mbarrier_init(int line, void* bar, unsigned count);
void __emu_mbarrier_arrive(int line, void* bar, long long tx_bytes);
void __emu_mbarrier_wait(int line, void* bar, unsigned parity);
void __emu_bulk_copy(int line, void* dst, const void* src, unsigned bytes, void* bar);
void __emu_bulk_store(int line, void* dst, const void* src, unsigned bytes);
void __emu_bulk_commit(void);
void __emu_bulk_wait(int pending);
void __emu_fence_proxy_async(void);
void __emu_fence_proxy_tensormap(const void* map);
void __emu_tma_load_2d(int line, void* dst, const void* map, int x, int y, void* bar);
unsigned long long __emu_wgmma_descriptor(int line, const void* tile, unsigned lbo, unsigned sbo, int swizzle128);
void __emu_wgmma(int line, float* d, int n, unsigned long long a, unsigned long long b, int scale_d, int nmajor_b);
void __emu_wgmma_commit(void);
void __emu_wgmma_wait(int pending);
}

// A tensor map, made on the host and passed by value: const __grid_constant__ TensorMap map.
struct TensorMap { alignas(64) unsigned long long opaque[16]; };

#define mbarrier_init(bar, count) __emu_mbarrier_init(__LINE__, (bar), (count))
#define mbarrier_arrive(bar) __emu_mbarrier_arrive(__LINE__, (bar), 0)
#define mbarrier_arrive_expect_tx(bar, bytes) __emu_mbarrier_arrive(__LINE__, (bar), (long long)(bytes))
#define mbarrier_wait_parity(bar, parity) __emu_mbarrier_wait(__LINE__, (bar), (parity))
#define bulk_copy_g2s(dst, src, bytes, bar) __emu_bulk_copy(__LINE__, (dst), (src), (bytes), (bar))
#define bulk_copy_s2g(dst, src, bytes) __emu_bulk_store(__LINE__, (dst), (src), (bytes))
#define bulk_commit_group() __emu_bulk_commit()
#define bulk_wait_group_read(n) __emu_bulk_wait(n)
#define fence_proxy_async() __emu_fence_proxy_async()
#define fence_proxy_tensormap(map) __emu_fence_proxy_tensormap(map)
#define tma_load_2d(dst, map, x, y, bar) __emu_tma_load_2d(__LINE__, (dst), (map), (x), (y), (bar))
static inline void fence_mbarrier_init() {}
#define wgmma_descriptor(tile, lbo, sbo) __emu_wgmma_descriptor(__LINE__, (tile), (lbo), (sbo), 0)
#define wgmma_descriptor_swizzle128(tile, lbo, sbo) __emu_wgmma_descriptor(__LINE__, (tile), (lbo), (sbo), 1)
static inline void wgmma_fence() {}
#define __EMU_WGMMA(n, d, a, b, scale_d, nmajor_b) do {                                                     \
        static_assert(sizeof(d) == (n) / 2 * sizeof(float), "a wgmma of n columns takes float[n / 2] accumulators"); \
        __emu_wgmma(__LINE__, (d), (n), (a), (b), (scale_d), (nmajor_b));                                       \
    } while (0)
#define wgmma_m64n8k16_bf16(d, a, b, scale_d) __EMU_WGMMA(8, d, a, b, scale_d, 0)
#define wgmma_m64n8k16_bf16_nmajor(d, a, b, scale_d) __EMU_WGMMA(8, d, a, b, scale_d, 1)
#define wgmma_m64n16k16_bf16(d, a, b, scale_d) __EMU_WGMMA(16, d, a, b, scale_d, 0)
#define wgmma_m64n16k16_bf16_nmajor(d, a, b, scale_d) __EMU_WGMMA(16, d, a, b, scale_d, 1)
#define wgmma_m64n32k16_bf16(d, a, b, scale_d) __EMU_WGMMA(32, d, a, b, scale_d, 0)
#define wgmma_m64n32k16_bf16_nmajor(d, a, b, scale_d) __EMU_WGMMA(32, d, a, b, scale_d, 1)
#define wgmma_m64n64k16_bf16(d, a, b, scale_d) __EMU_WGMMA(64, d, a, b, scale_d, 0)
#define wgmma_m64n64k16_bf16_nmajor(d, a, b, scale_d) __EMU_WGMMA(64, d, a, b, scale_d, 1)
#define wgmma_m64n128k16_bf16(d, a, b, scale_d) __EMU_WGMMA(128, d, a, b, scale_d, 0)
#define wgmma_m64n128k16_bf16_nmajor(d, a, b, scale_d) __EMU_WGMMA(128, d, a, b, scale_d, 1)
#define wgmma_m64n256k16_bf16(d, a, b, scale_d) __EMU_WGMMA(256, d, a, b, scale_d, 0)
#define wgmma_m64n256k16_bf16_nmajor(d, a, b, scale_d) __EMU_WGMMA(256, d, a, b, scale_d, 1)
#define wgmma_commit_group() __emu_wgmma_commit()
#define wgmma_wait_group(n) __emu_wgmma_wait(n)
