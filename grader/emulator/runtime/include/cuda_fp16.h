// Half precision (__half) for emulated kernels: two bytes, IEEE binary16; conversions round to the
// nearest even, arithmetic goes through float and rounds back, as the GPU's half instructions do.
#pragma once
#include <cstdint>
#include <cstring>

extern "C++" {

static inline unsigned short __emu_float_to_half_bits(float f)
{
    unsigned x;
    std::memcpy(&x, &f, 4);
    const unsigned sign = (x >> 16) & 0x8000u, exponent = (x >> 23) & 0xffu, mantissa = x & 0x7fffffu;
    if (exponent == 0xffu) return (unsigned short)(sign | 0x7c00u | (mantissa ? 0x200u : 0u));   // inf, NaN
    const int e = int(exponent) - 127 + 15;
    if (e >= 31) return (unsigned short)(sign | 0x7c00u);                                     // too large: inf
    unsigned bits, rest, halfway;
    if (e <= 0) {                                                                                // subnormal
        if (e < -10) return (unsigned short)sign;
        const unsigned m = mantissa | 0x800000u, shift = unsigned(14 - e);
        bits = m >> shift;
        rest = m & ((1u << shift) - 1);
        halfway = 1u << (shift - 1);
    } else {
        bits = (unsigned(e) << 10) | (mantissa >> 13);
        rest = mantissa & 0x1fffu;
        halfway = 0x1000u;
    }
    if (rest > halfway || (rest == halfway && (bits & 1u))) bits++;   // a carry into the exponent is right
    return (unsigned short)(sign | bits);
}

static inline float __emu_half_bits_to_float(unsigned short h)
{
    const unsigned sign = (unsigned(h) & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    unsigned x;
    if (exponent == 0x1fu) {
        x = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent) {
        x = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
    } else if (mantissa) {                                   // subnormal: normalise
        int e = -1;
        unsigned m = mantissa;
        do { e++; m <<= 1; } while (!(m & 0x400u));
        x = sign | (unsigned(127 - 15 - e) << 23) | ((m & 0x3ffu) << 13);
    } else {
        x = sign;
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

struct __half {
    unsigned short __x;
    __half() = default;
    __half(float f) : __x(__emu_float_to_half_bits(f)) {}
    __half(double f) : __x(__emu_float_to_half_bits(float(f))) {}
    __half(int i) : __x(__emu_float_to_half_bits(float(i))) {}
    operator float() const { return __emu_half_bits_to_float(__x); }
};
typedef __half half;

static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline float __half2float(__half h) { return float(h); }
static inline __half __hadd(__half a, __half b) { return __half(float(a) + float(b)); }
static inline __half __hsub(__half a, __half b) { return __half(float(a) - float(b)); }
static inline __half __hmul(__half a, __half b) { return __half(float(a) * float(b)); }
static inline __half __hfma(__half a, __half b, __half c) { return __half(float(a) * float(b) + float(c)); }
static inline __half __hneg(__half a) { __half r = a; r.__x ^= 0x8000u; return r; }
static inline __half operator+(__half a, __half b) { return __hadd(a, b); }
static inline __half operator-(__half a, __half b) { return __hsub(a, b); }
static inline __half operator*(__half a, __half b) { return __hmul(a, b); }
static inline __half operator/(__half a, __half b) { return __half(float(a) / float(b)); }
static inline __half operator-(__half a) { return __hneg(a); }

}
