// The course's Hopper header for nvcc (sm_90): mbarriers and bulk asynchronous copies (global to shared
// on an mbarrier, shared to global in groups) in inline PTX, so that a student's source needs no asm of
// its own. The emulator's own, with the same calls and what each does, is include/hopper.cuh.
#pragma once
#include <cstdint>

// A tensor map, made on the host (grader.kernels.tensor_map.tensor_map_2d) and passed by value:
// const __grid_constant__ TensorMap map. Here it holds the address of the driver's CUtensorMap in device
// memory: PyCUDA passes a kernel's arguments as one packed buffer, and a 128-byte map passed that way does
// not reach the tensor copy intact, so tensor_map_2d puts the map in device memory and passes its address.
struct TensorMap { const void* global; };

static __device__ __forceinline__ unsigned __hopper_smem(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

static __device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(__hopper_smem(bar)), "r"(count) : "memory");
}

static __device__ __forceinline__ void fence_mbarrier_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

static __device__ __forceinline__ void mbarrier_arrive(uint64_t* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(__hopper_smem(bar)) : "memory");
}

static __device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(__hopper_smem(bar)), "r"(bytes)
                 : "memory");
}

static __device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, unsigned parity)
{
    asm volatile("{\n\t.reg .pred done;\n"
                 "HOPPER_WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
                 "@!done bra HOPPER_WAIT_%=;\n}"
                 :: "r"(__hopper_smem(bar)), "r"(parity) : "memory");
}

static __device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, uint64_t* bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(__hopper_smem(dst)), "l"(src), "r"(bytes), "r"(__hopper_smem(bar)) : "memory");
}

static __device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

static __device__ __forceinline__ void bulk_copy_s2g(void* dst, const void* src, unsigned bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 :: "l"(dst), "r"(__hopper_smem(src)), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void bulk_commit_group()
{
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// n: a constant (PTX takes it as an immediate)
#define bulk_wait_group_read(n) asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(n) : "memory")

// A box of the matrix `map` describes, at column x, row y, landing on `bar`; outside the matrix, zeros.
static __device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, int x, int y, uint64_t* bar)
{
    // the host wrote the map: the tensor-map proxy must not use what it cached for that address before
    asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;" :: "l"(map->global) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(__hopper_smem(dst)), "l"(map->global), "r"(x), "r"(y),
                    "r"(__hopper_smem(bar)) : "memory");
}
