// The contract between an emulated kernel module and the emulator runtime.
// Included by both cuda_emu.h (kernel side) and runtime.cpp (scheduler side).
#pragma once
#include <cstddef>
#include <cstdint>

struct uint3 { unsigned int x, y, z; };

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

namespace emu {

// What the runtime needs to start one CUDA thread of a kernel: the thunk
// unpacks the parameter buffer (laid out like CUDA's) and calls the kernel.
using Thunk = void (*)(void* fn, const unsigned char* params);

enum ParamKind : int { kOther = 0, kPointer = 1, kInteger = 2, kFloat = 3 };

struct KernelEntry {
    const char* name;          // as written in the source
    void* fn;
    Thunk thunk;
    int nparams;
    const size_t* sizes;
    const size_t* aligns;
    const int* kinds;
    const char* const* type_names;  // __PRETTY_FUNCTION__ text holding the type
};

struct GlobalEntry {
    const char* name;
    void* addr;
    size_t size;
};

struct ModuleInfo {
    int abi_version;
    int nkernels;
    const KernelEntry* kernels;
    int nglobals;
    const GlobalEntry* globals;
    char* shared_begin;  // the module's static __shared__ variables
    char* shared_end;
};

constexpr int kAbiVersion = 1;

}  // namespace emu
