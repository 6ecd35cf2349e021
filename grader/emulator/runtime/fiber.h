// Minimal cooperative context switch: each CUDA thread of a block is a fiber
// on one OS thread. Hand-written because swapcontext() makes a system call per
// switch, which is most of the run time of a tiled kernel with barriers.
#pragma once
#include <cstddef>

extern "C" void emu_fiber_switch(void** save_sp, void* next_sp);

namespace emu {

// Prepares a fiber stack whose first switch-in calls entry(), which must never
// return. Returns the initial stack pointer.
void* fiber_init(char* stack_lo, size_t size, void (*entry)());

}  // namespace emu
