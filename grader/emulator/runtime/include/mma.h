// nvcuda::wmma for emulated kernels: 16 x 16 x 16 tiles of __half or __nv_bfloat16, float accumulators.
// A fragment's elements are spread over the warp, 8 a lane: element (r, c) of its 16 x 16 tile is lane
// (16 r + c) / 8's, at x[(16 r + c) % 8] (CUDA leaves which lane holds which element unspecified; the
// GPU's is another). The calls named _sync are warp-wide, as on the GPU: the warp's 32 lanes meet in each,
// and a lane that goes elsewhere is reported with the call's line.
#pragma once
#include <cstddef>
#include "cuda_bf16.h"
#include "cuda_fp16.h"

extern "C++" {
namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, class T, class Layout>
struct __emu_fragment {
    typedef T element_type;
    static const int num_elements = 8;
    T x[8];
};

// Only the 16 x 16 x 16 shape: another is an incomplete type here.
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment;
template <class T, class L> struct fragment<matrix_a, 16, 16, 16, T, L> : __emu_fragment<matrix_a, T, L> {};
template <class T, class L> struct fragment<matrix_b, 16, 16, 16, T, L> : __emu_fragment<matrix_b, T, L> {};
template <class T> struct fragment<accumulator, 16, 16, 16, T, void> : __emu_fragment<accumulator, T, void> {};

// Every lane of the warp meets here (its data, 16 bytes, goes to all); returns the 32 lanes' data.
static inline const unsigned char* __emu_wmma_meet(int line, const void* mine)
{
    unsigned arrived;
    const unsigned char* slots = __emu_warp_exchange(line, 0xffffffffu, mine, 16, &arrived);
    if (arrived != 0xffffffffu) __emu_trap("a warp-wide wmma call that not every lane of the warp reaches (a branch around it, or lanes "
                                                "that returned early?)", "kernel.cu", line);
    return slots;
}

template <class Use, class T, class L, class V>
static inline void fill_fragment(__emu_fragment<Use, T, L>& f, V v)
{
    for (int i = 0; i < 8; i++) f.x[i] = T(v);
}

// Element e of a tile (0..255, row-major in the tile) at `p` with leading dimension `ldm`.
template <class T>
static inline T __emu_wmma_element(const T* p, unsigned ldm, int e, bool row_major_memory)
{
    const int r = e / 16, c = e % 16;
    return row_major_memory ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
}

template <class Use, class T, class L>
static inline void __emu_wmma_load(__emu_fragment<Use, T, L>& f, const T* p, unsigned ldm, bool row_major_memory,
                                   int line)
{
    char nothing[16] = {0};
    __emu_wmma_meet(line, nothing);
    const int base = int(__emu_lane_id()) * 8;
    for (int i = 0; i < 8; i++) f.x[i] = __emu_wmma_element(p, ldm, base + i, row_major_memory);
}

// A: element (m, k) of the tile; B: element (k, n). Row-major memory unless the layout says col_major.
template <class T, class L>
static inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, L>& f, const T* p, unsigned ldm,
                                    int line = __builtin_LINE())
{
    __emu_wmma_load(f, p, ldm, !std::is_same<L, col_major>::value, line);
}

template <class T, class L>
static inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, L>& f, const T* p, unsigned ldm,
                                    int line = __builtin_LINE())
{
    __emu_wmma_load(f, p, ldm, !std::is_same<L, col_major>::value, line);
}

template <class T>
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T, void>& f, const T* p, unsigned ldm,
                                    layout_t layout, int line = __builtin_LINE())
{
    __emu_wmma_load(f, p, ldm, layout == mem_row_major, line);
}

template <class T>
static inline void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T, void>& f, unsigned ldm,
                                     layout_t layout, int line = __builtin_LINE())
{
    char nothing[16] = {0};
    __emu_wmma_meet(line, nothing);
    const int base = int(__emu_lane_id()) * 8;
    for (int i = 0; i < 8; i++) {
        const int e = base + i, r = e / 16, c = e % 16;
        if (layout == mem_row_major) p[size_t(r) * ldm + c] = f.x[i];
        else p[size_t(c) * ldm + r] = f.x[i];
    }
}

// D = A B + C, each product and sum in float (the GPU's tensor cores sum in another order).
template <class Tin, class LA, class LB, class Tacc>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, Tacc, void>& d,
                            const fragment<matrix_a, 16, 16, 16, Tin, LA>& a,
                            const fragment<matrix_b, 16, 16, 16, Tin, LB>& b,
                            const fragment<accumulator, 16, 16, 16, Tacc, void>& c, int line = __builtin_LINE())
{
    static_assert(sizeof(Tin) == 2, "wmma inputs here are __half or __nv_bfloat16");
    Tin A[256], B[256];
    std::memcpy(A, __emu_wmma_meet(line, a.x), sizeof A);     // lane l's 16 bytes are elements 8 l .. 8 l + 7
    std::memcpy(B, __emu_wmma_meet(line, b.x), sizeof B);
    const int base = int(__emu_lane_id()) * 8;
    float out[8];
    for (int i = 0; i < 8; i++) {
        const int e = base + i, m = e / 16, n = e % 16;
        float sum = float(c.x[i]);
        for (int k = 0; k < 16; k++) sum += float(A[m * 16 + k]) * float(B[k * 16 + n]);
        out[i] = sum;
    }
    for (int i = 0; i < 8; i++) d.x[i] = Tacc(out[i]);
}

}  // namespace wmma
}  // namespace nvcuda
}
