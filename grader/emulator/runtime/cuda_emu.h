// CUDA C device API for kernels compiled by the host C++ compiler.
// Every CUDA thread runs as a fiber; the functions declared extern "C" below
// live in the runtime library (runtime.cpp), where a barrier or a warp
// exchange switches to the next fiber.
#pragma once
#include <cassert>  // the emulator's own (include/assert.h)
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>      // before the clock() macro below, for headers that include it later (<complex>)
#include <limits>
#include <math.h>
#include <new>
#include <stdio.h>
#include <type_traits>
#include <utility>

#include "emu_abi.h"

// ---- declaration specifiers -------------------------------------------------
#ifdef EMU_SCAN
// Preprocessing pass that finds kernels and device variables (build.py).
#define __global__ __EMU_GLOBAL__
#define __constant__ __EMU_VARIABLE__
#define __device__ __EMU_DEVICE__
#else
#define __global__
#define __constant__
#define __device__
#endif
#define __host__
#define __managed__
#define __shared__ __attribute__((section("emu_shared"))) static
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __grid_constant__
// What nvcc defines in a device pass for sm_90, so that a source cannot tell the emulator from nvcc.
#define __CUDACC__ 1
#define __CUDA_ARCH__ 900
#define __NVCC__ 1
#define __CUDACC_VER_MAJOR__ 13
#define __CUDACC_VER_MINOR__ 0
#define __CUDACC_VER_BUILD__ 88
#define __EMU_CPU__ 1            // the emulator's own headers tell the CPU build apart by this (sources may not)
#define CUDART_INF_F HUGE_VALF
#define CUDART_NAN_F __builtin_nanf("")

// ---- built-in variables -----------------------------------------------------
extern "C" {
extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;
extern unsigned char* __emu_dynamic_shared;  // extern __shared__ arrays
}
static const int warpSize = 32;

#define __EMU_DYNAMIC_SHARED(type, name) type* const name = reinterpret_cast<type*>(__emu_dynamic_shared)

// Each __shared__ variable (build.py rewrites its declaration) is a reference
// to its storage. Analysis builds (-fsanitize=kernel-address) reach it through
// a pointer the compiler cannot see through: the sanitizer instrumentation
// skips constant-index accesses to a static array it can prove in bounds, and
// every shared access must reach the analysis. The difference lives here, not
// in the expansion, so that the student's tokens are the same in both builds.
#ifdef __SANITIZE_ADDRESS__
template <class T> static inline T& __emu_shared_ref(T& storage) { T* p = &storage; __asm__("" : "+r"(p)); return *p; }
#else
template <class T> static inline T& __emu_shared_ref(T& storage) { return storage; }
#endif
#define __EMU_SHARED_VAR(type, plain_type, name, dims) \
    __attribute__((section("emu_shared"))) static type name##__emu_storage dims; \
    plain_type (&name) dims = __emu_shared_ref(name##__emu_storage)

// ---- vector types -----------------------------------------------------------
#define EMU_VEC2(T, N, A) struct __attribute__((aligned(A))) N##2 { T x, y; }; \
    static inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define EMU_VEC3(T, N) struct N##3 { T x, y, z; }; \
    static inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define EMU_VEC4(T, N, A) struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; \
    static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
EMU_VEC2(float, float, 8) EMU_VEC3(float, float) EMU_VEC4(float, float, 16)
EMU_VEC2(double, double, 16) EMU_VEC3(double, double) EMU_VEC4(double, double, 16)
EMU_VEC2(int, int, 8) EMU_VEC3(int, int) EMU_VEC4(int, int, 16)
EMU_VEC2(unsigned int, uint, 8) EMU_VEC4(unsigned int, uint, 16)  // uint3 is in emu_abi.h
EMU_VEC2(char, char, 2) EMU_VEC4(char, char, 4)
EMU_VEC2(unsigned char, uchar, 2) EMU_VEC4(unsigned char, uchar, 4)
EMU_VEC2(short, short, 4) EMU_VEC4(short, short, 8)
EMU_VEC2(long long, longlong, 16) EMU_VEC2(unsigned long long, ulonglong, 16)
#undef EMU_VEC2
#undef EMU_VEC3
#undef EMU_VEC4
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }

// ---- runtime services (runtime.cpp) ----------------------------------------
extern "C" {
void __emu_syncthreads(int line);
int __emu_syncthreads_reduce(int line, int predicate, int op);  // op: 0 count, 1 and, 2 or
void __emu_syncwarp(int line, unsigned mask);
// Rendezvous of the lanes in `mask`: deposits `size` bytes, returns the 32
// slots (16 bytes each) of this exchange; *arrived gets the lanes that took part.
const unsigned char* __emu_warp_exchange(int line, unsigned mask, const void* value, size_t size, unsigned* arrived);
unsigned __emu_lane_id(void);
unsigned __emu_activemask(void);
int __emu_printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void __emu_trap(const char* why, const char* file, int line) __attribute__((noreturn));
long long __emu_clock(void);
}

#define __syncthreads() __emu_syncthreads(__LINE__)
#define __syncthreads_count(p) __emu_syncthreads_reduce(__LINE__, (p), 0)
#define __syncthreads_and(p) __emu_syncthreads_reduce(__LINE__, (p), 1)
#define __syncthreads_or(p) __emu_syncthreads_reduce(__LINE__, (p), 2)
#define __syncwarp(...) __emu_syncwarp_at(__LINE__, ##__VA_ARGS__)
static inline void __emu_syncwarp_at(int line, unsigned mask = 0xffffffffu) { __emu_syncwarp(line, mask); }
#define printf __emu_printf
#define __trap() __emu_trap("__trap() called", __FILE__, __LINE__)
static inline void __threadfence() {}
static inline void __threadfence_block() {}
static inline void __threadfence_system() {}
static inline void __nanosleep(unsigned) {}
static inline long long clock64() { return __emu_clock(); }
static inline long long __emu_clock32() { return __emu_clock(); }
#define clock() ((int)__emu_clock32())

// ---- warp-level primitives --------------------------------------------------
static inline unsigned __activemask() { return __emu_activemask(); }

template <class T>
static inline T __emu_shuffle(int line, int mode, unsigned mask, T var, int arg, int width = 32) {
    static_assert(sizeof(T) <= 16, "shuffle of a type wider than 16 bytes");
    unsigned arrived;
    const unsigned char* slots = __emu_warp_exchange(line, mask, &var, sizeof(T), &arrived);
    int lane = (int)__emu_lane_id();
    int w = (width <= 0 || width > 32) ? 32 : width;
    int base = lane & ~(w - 1), src = lane;
    switch (mode) {
        case 0: src = base + (arg & (w - 1)); break;                            // idx
        case 1: src = (lane - base) >= arg ? lane - arg : lane; break;           // up
        case 2: src = (lane - base) + arg < w ? lane + arg : lane; break;        // down
        case 3: src = lane ^ arg; if (src >= base + w) src = lane; break;        // xor
    }
    if (src < 0 || src > 31 || !(arrived & (1u << src))) src = lane;  // inactive source: undefined on a GPU
    T out;
    std::memcpy((void*)&out, slots + 16 * src, sizeof(T));
    return out;
}
#define __shfl_sync(...) __emu_shuffle(__LINE__, 0, __VA_ARGS__)
#define __shfl_up_sync(...) __emu_shuffle(__LINE__, 1, __VA_ARGS__)
#define __shfl_down_sync(...) __emu_shuffle(__LINE__, 2, __VA_ARGS__)
#define __shfl_xor_sync(...) __emu_shuffle(__LINE__, 3, __VA_ARGS__)

static inline unsigned __emu_vote(int line, unsigned mask, int pred, int mode) {
    unsigned arrived;
    int p = pred != 0;
    const unsigned char* slots = __emu_warp_exchange(line, mask, &p, sizeof p, &arrived);
    unsigned ballot = 0;
    for (int i = 0; i < 32; i++)
        if ((arrived >> i) & 1) { int v; std::memcpy(&v, slots + 16 * i, sizeof v); ballot |= (unsigned)v << i; }
    if (mode == 0) return ballot;
    if (mode == 1) return ballot != 0;
    return ballot == arrived;
}
#define __ballot_sync(mask, p) __emu_vote(__LINE__, mask, p, 0)
#define __any_sync(mask, p) ((int)__emu_vote(__LINE__, mask, p, 1))
#define __all_sync(mask, p) ((int)__emu_vote(__LINE__, mask, p, 2))

template <class T>
static inline T __emu_warp_reduce(int line, unsigned mask, T value, int op) {
    unsigned arrived;
    const unsigned char* slots = __emu_warp_exchange(line, mask, &value, sizeof value, &arrived);
    T acc = value;
    for (int i = 0; i < 32; i++) {
        if (!((arrived >> i) & 1)) continue;
        T v; std::memcpy(&v, slots + 16 * i, sizeof v);
        if (op == 0) acc = (i == (int)__builtin_ctz(arrived)) ? v : acc + v;
        else if (op == 1) acc = v < acc ? v : acc;
        else if (op == 2) acc = v > acc ? v : acc;
    }
    return acc;
}
#define __reduce_add_sync(mask, v) __emu_warp_reduce(__LINE__, mask, v, 0)
#define __reduce_min_sync(mask, v) __emu_warp_reduce(__LINE__, mask, v, 1)
#define __reduce_max_sync(mask, v) __emu_warp_reduce(__LINE__, mask, v, 2)

// ---- atomics (runtime.cpp: never instrumented, so never a race) -------------
#define EMU_ATOMIC_DECL(T) \
    extern "C++" T atomicAdd(T*, T); extern "C++" T atomicExch(T*, T);
EMU_ATOMIC_DECL(int) EMU_ATOMIC_DECL(unsigned int) EMU_ATOMIC_DECL(unsigned long long)
EMU_ATOMIC_DECL(float) EMU_ATOMIC_DECL(double)
#undef EMU_ATOMIC_DECL
#define EMU_ATOMIC_INT_DECL(T) \
    extern "C++" T atomicSub(T*, T); extern "C++" T atomicMin(T*, T); extern "C++" T atomicMax(T*, T); \
    extern "C++" T atomicAnd(T*, T); extern "C++" T atomicOr(T*, T); extern "C++" T atomicXor(T*, T); \
    extern "C++" T atomicCAS(T*, T, T);
EMU_ATOMIC_INT_DECL(int) EMU_ATOMIC_INT_DECL(unsigned int) EMU_ATOMIC_INT_DECL(unsigned long long)
EMU_ATOMIC_INT_DECL(long long)
#undef EMU_ATOMIC_INT_DECL
extern "C++" unsigned int atomicInc(unsigned int*, unsigned int);
extern "C++" unsigned int atomicDec(unsigned int*, unsigned int);
extern "C++" unsigned short atomicCAS(unsigned short*, unsigned short, unsigned short);

// ---- math and bit intrinsics -----------------------------------------------
template <class A, class B>
static inline typename std::common_type<A, B>::type min(A a, B b) { return b < a ? b : a; }
template <class A, class B>
static inline typename std::common_type<A, B>::type max(A a, B b) { return a < b ? b : a; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float fdividef(float a, float b) { return a / b; }
// glibc declares these names itself, so they are macros here.
#define __expf(x) expf(x)
#define __exp10f(x) exp10f(x)
#define __logf(x) logf(x)
#define __log2f(x) log2f(x)
#define __log10f(x) log10f(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
#define __powf(a, b) powf(a, b)
static inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned x) { return (float)x; }
static inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
static inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
static inline float __uint_as_float(unsigned i) { float x; std::memcpy(&x, &i, 4); return x; }
static inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }
static inline double __longlong_as_double(long long i) { double x; std::memcpy(&x, &i, 8); return x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
    return (x >> 16) | (x << 16);
}
static inline int __mul24(int a, int b) { return a * b; }
static inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline void __stcg(T* p, T v) { *p = v; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }

// ---- parameter unpacking (used by the registration code build.py appends) ---
namespace emu {

template <class T> constexpr int kind_of() {
    return std::is_pointer<T>::value ? kPointer
         : std::is_integral<T>::value || std::is_enum<T>::value ? kInteger
         : std::is_floating_point<T>::value ? kFloat : kOther;
}
template <class T> const char* type_name() { return __PRETTY_FUNCTION__; }

template <class... A> struct Params {
    static constexpr size_t n = sizeof...(A);
    static constexpr size_t sizes[n + 1] = {sizeof(A)..., 0};
    static constexpr size_t aligns[n + 1] = {alignof(A)..., 0};
    static constexpr int kinds[n + 1] = {kind_of<A>()..., 0};
    static constexpr size_t offset(size_t i) {
        size_t off = 0;
        for (size_t k = 0; k <= i && k < n; k++) {
            off = (off + aligns[k] - 1) / aligns[k] * aligns[k];
            if (k < i) off += sizes[k];
        }
        return off;
    }
    template <class T> static T load(const unsigned char* p) { T v; std::memcpy((void*)&v, p, sizeof(T)); return v; }
    template <size_t... I> static void call(void* fn, const unsigned char* buf, std::index_sequence<I...>) {
        reinterpret_cast<void (*)(A...)>(fn)(load<A>(buf + offset(I))...);
    }
    static void thunk(void* fn, const unsigned char* buf) { call(fn, buf, std::index_sequence_for<A...>{}); }
    static const char* const* names() {
        static const char* const v[n + 1] = {type_name<A>()..., nullptr};
        return v;
    }
};

template <class... A>
KernelEntry kernel_entry(const char* name, void (*fn)(A...)) {
    using P = Params<typename std::decay<A>::type...>;
    return KernelEntry{name, reinterpret_cast<void*>(fn), &P::thunk, (int)P::n,
                       P::sizes, P::aligns, P::kinds, P::names()};
}

}  // namespace emu
