// The course's Hopper header for nvcc (sm_90a): mbarriers, bulk asynchronous copies (global to shared
// on an mbarrier, shared to global in groups), tensor copies and wgmma in inline PTX, so that a student's source needs no asm of
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

// Once per thread, before its first tensor copy through `map`: the host wrote the map, and the copies read it
// through the tensor-map proxy, which must not use what it holds from an earlier map at that address. (Not
// inside tma_load_2d: a fence of the whole system before every copy makes a pipelined GEMM four times slower.)
static __device__ __forceinline__ void fence_proxy_tensormap(const TensorMap* map)
{
    asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;" :: "l"(map->global) : "memory");
}

// A box of the matrix `map` describes, at column x, row y, landing on `bar`; outside the matrix, zeros.
static __device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, int x, int y, uint64_t* bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(__hopper_smem(dst)), "l"(map->global), "r"(x), "r"(y),
                    "r"(__hopper_smem(bar)) : "memory");
}

// A bf16 operand of wgmma in shared memory, no swizzle: core matrices of 8 rows x 16 bytes (8 elements of K
// for A and a K-major B, 8 columns at one k for an N-major B); LBO bytes between core matrices along K, SBO
// along M or N.
static __device__ __forceinline__ uint64_t wgmma_descriptor(const void* tile, unsigned lbo, unsigned sbo)
{
    return ((__hopper_smem(tile) & 0x3FFFF) >> 4) | (uint64_t((lbo & 0x3FFFF) >> 4) << 16)
           | (uint64_t((sbo & 0x3FFFF) >> 4) << 32);
}

// The same operand laid out as a tensor copy with swizzle=128 lands it: rows of 128 bytes (64 elements of K
// for A and a K-major B, 64 columns at one k for an N-major B), SBO bytes between groups of 8 rows; LBO bytes
// between blocks of 64 columns of an N-major B (a K-major operand ignores it).
static __device__ __forceinline__ uint64_t wgmma_descriptor_swizzle128(const void* tile, unsigned lbo, unsigned sbo)
{
    return wgmma_descriptor(tile, lbo, sbo) | (uint64_t(1) << 62);
}

static __device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

static __device__ __forceinline__ void wgmma_commit_group()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// n: a constant (PTX takes it as an immediate)
#define wgmma_wait_group(n) asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(n) : "memory")

// PyCUDA wraps a source in extern "C" unless no_extern_c: templates need C++ linkage.
extern "C++" {

// D (64 x n) = A (64 x 16) B (16 x n) + (scale_d ? D : 0) by a warpgroup, bf16 operands by descriptor, FP32
// accumulators; B K-major (TRANS_B 0) or N-major (1). PTX names every register, so each width is written out.

template <int TRANS_B>
static __device__ __forceinline__ void __hopper_wgmma_n8(float (&d)[4], uint64_t a, uint64_t b, int scale_d)
{
    asm volatile(
                 "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3"
                 "}, %4, %5, p, 1, 1, 0, %7;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_B));
}

template <int TRANS_B>
static __device__ __forceinline__ void __hopper_wgmma_n16(float (&d)[8], uint64_t a, uint64_t b, int scale_d)
{
    asm volatile(
                 "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7"
                 "}, %8, %9, p, 1, 1, 0, %11;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_B));
}

template <int TRANS_B>
static __device__ __forceinline__ void __hopper_wgmma_n32(float (&d)[16], uint64_t a, uint64_t b, int scale_d)
{
    asm volatile(
                 "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
                 "}, %16, %17, p, 1, 1, 0, %19;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                    "+f"(d[15])
                 : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_B));
}

template <int TRANS_B>
static __device__ __forceinline__ void __hopper_wgmma_n64(float (&d)[32], uint64_t a, uint64_t b, int scale_d)
{
    asm volatile(
                 "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
                 "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, %32, %33, p, 1, 1, 0, %35;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                    "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
                    "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
                    "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_B));
}

template <int TRANS_B>
static __device__ __forceinline__ void __hopper_wgmma_n128(float (&d)[64], uint64_t a, uint64_t b, int scale_d)
{
    asm volatile(
                 "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
                 "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "
                 "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "
                 "%59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, %67;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                    "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
                    "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
                    "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                    "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
                    "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
                    "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
                    "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_B));
}

template <int TRANS_B>
static __device__ __forceinline__ void __hopper_wgmma_n256(float (&d)[128], uint64_t a, uint64_t b, int scale_d)
{
    asm volatile(
                 "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
                 "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "
                 "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "
                 "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, "
                 "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, "
                 "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, "
                 "%113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
                 "}, %128, %129, p, 1, 1, 0, %131;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                    "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
                    "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
                    "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                    "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
                    "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
                    "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
                    "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),
                    "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
                    "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),
                    "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),
                    "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),
                    "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]),
                    "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]),
                    "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]),
                    "+f"(d[127])
                 : "l"(a), "l"(b), "r"(scale_d), "n"(TRANS_B));
}

// B K-major (N x K, as a descriptor of wgmma_descriptor's core matrices), and B N-major (K x N, row-major as
// the course stores it): _nmajor.
#define __HOPPER_WGMMA(n)                                                                                       \
    static __device__ __forceinline__ void wgmma_m64n##n##k16_bf16(float (&d)[n / 2], uint64_t a, uint64_t b,   \
                                                                   int scale_d)                                \
    {                                                                                                           \
        __hopper_wgmma_n##n<0>(d, a, b, scale_d);                                                               \
    }                                                                                                           \
    static __device__ __forceinline__ void wgmma_m64n##n##k16_bf16_nmajor(float (&d)[n / 2], uint64_t a,        \
                                                                          uint64_t b, int scale_d)             \
    {                                                                                                           \
        __hopper_wgmma_n##n<1>(d, a, b, scale_d);                                                               \
    }
__HOPPER_WGMMA(8)
__HOPPER_WGMMA(16)
__HOPPER_WGMMA(32)
__HOPPER_WGMMA(64)
__HOPPER_WGMMA(128)
__HOPPER_WGMMA(256)
#undef __HOPPER_WGMMA

}  // extern "C++"
