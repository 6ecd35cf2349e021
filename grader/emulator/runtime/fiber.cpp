#include "fiber.h"

#include <cstdint>
#include <cstring>

#if defined(__APPLE__)
#define EMU_SYM(name) "_" #name
#define EMU_TYPE(name)
#else
#define EMU_SYM(name) #name
#define EMU_TYPE(name) ".type " #name ", @function\n.hidden " #name "\n"  // called directly, not through the PLT
#endif

#if defined(__x86_64__)
// Saves the callee-saved registers of the System V ABI on the current stack.
// Leaves with an indirect jump, not `ret`: the return-stack predictor guesses
// the caller of the *previous* switch, wrong at every thread's start; the
// branch-target predictor learns where this jump goes (fiber_main in a block's
// first pass, the kernel's barrier call site after). A block of 256 threads
// with one barrier: about 1.5x faster (measured side by side, this machine).
__asm__(
    ".text\n"
    ".globl " EMU_SYM(emu_fiber_switch) "\n"
    EMU_TYPE(emu_fiber_switch)
    EMU_SYM(emu_fiber_switch) ":\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  popq %rcx\n  jmpq *%rcx\n");

void* emu::fiber_init(char* stack_lo, size_t size, void (*entry)()) {
    auto top = reinterpret_cast<uintptr_t>(stack_lo + size) & ~uintptr_t(15);
    auto* sp = reinterpret_cast<uintptr_t*>(top);
    *--sp = 0;                                      // entry's return address (never used)
    *--sp = reinterpret_cast<uintptr_t>(entry);     // where the first 'ret' goes
    *--sp = 0;                                      // rbp: the end of a frame-pointer chain
    // rbx r12 r13 r14 r15: 0xff bytes, like the rest of a new stack's top (runtime.cpp, fresh_fiber), since
    // the kernel's frame reuses these words once they are popped
    for (int i = 0; i < 5; i++) *--sp = ~uintptr_t(0);
    return sp;
}

#elif defined(__aarch64__)
// x19-x30 and d8-d15 are callee-saved on AArch64.
__asm__(
    ".text\n"
    ".globl " EMU_SYM(emu_fiber_switch) "\n"
    EMU_TYPE(emu_fiber_switch)
    ".p2align 2\n"
    EMU_SYM(emu_fiber_switch) ":\n"
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mov x9, sp\n  str x9, [x0]\n  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n"
    "  ret\n");

void* emu::fiber_init(char* stack_lo, size_t size, void (*entry)()) {
    auto top = reinterpret_cast<uintptr_t>(stack_lo + size) & ~uintptr_t(15);
    auto* frame = reinterpret_cast<uintptr_t*>(top - 160);
    std::memset(frame, 0xff, 160);                   // like the rest of a new stack's top (runtime.cpp, fresh_fiber)
    frame[10] = 0;                                   // x29: the end of a frame-pointer chain
    frame[11] = reinterpret_cast<uintptr_t>(entry);  // x30: where 'ret' goes
    return frame;
}

#else
#error "the emulator's fibers support x86-64 and AArch64"
#endif
