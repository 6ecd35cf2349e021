// bfloat16 (__nv_bfloat16) for emulated kernels: the upper two bytes of a float, rounded to the
// nearest even; arithmetic goes through float.
#pragma once
#include <cstdint>
#include <cstring>

extern "C++" {

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f)
    {
        unsigned x;
        std::memcpy(&x, &f, 4);
        if ((x & 0x7fffffffu) > 0x7f800000u) __x = (unsigned short)((x >> 16) | 0x40u);      // NaN stays NaN
        else __x = (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
    __nv_bfloat16(double f) : __nv_bfloat16(float(f)) {}
    __nv_bfloat16(int i) : __nv_bfloat16(float(i)) {}
    operator float() const
    {
        const unsigned x = unsigned(__x) << 16;
        float f;
        std::memcpy(&f, &x, 4);
        return f;
    }
};
typedef __nv_bfloat16 nv_bfloat16;

static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
static inline __nv_bfloat16 operator+(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(float(a) + float(b)); }
static inline __nv_bfloat16 operator-(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(float(a) - float(b)); }
static inline __nv_bfloat16 operator*(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(float(a) * float(b)); }

}
