// The CUDA pipeline primitives (asynchronous global -> shared copies,
// cp.async on the GPU) for emulated kernels. As on the GPU, a copy is not
// done when __pipeline_memcpy_async returns: each thread's copies wait in a
// queue, in batches closed by __pipeline_commit(), and are carried out by
// __pipeline_wait_prior(n), which completes all but the n newest batches.
// So a kernel that reads shared memory before waiting reads stale data here
// too, and the shared-memory writes appear (to the race and bank-conflict
// analysis) at the wait.
#pragma once
#include <cstddef>
#include <cstring>

struct __EmuAsyncCopy {
    void* dst;
    const void* src;
    unsigned int size, zfill, batch;
};

struct __EmuAsyncQueue {
    unsigned long long block;   // the block this thread's queue belongs to (+1; 0: unused)
    unsigned int committed, count;
    __EmuAsyncCopy copies[256];
};

static __forceinline__ __EmuAsyncQueue& __emu_async_queue()
{
    static __EmuAsyncQueue queues[1024];
    const unsigned int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned long long b = 1 + blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    __EmuAsyncQueue& q = queues[t];
    if (q.block != b) {        // a new block: whatever an earlier thread left is gone
        q.block = b;
        q.committed = q.count = 0;
    }
    return q;
}

template <class T>
static __forceinline__ void __emu_async_move(void* dst, const void* src, bool zero)
{
    *static_cast<T*>(dst) = zero ? T{} : *static_cast<const T*>(src);
}

extern "C" void __emu_async_copied(unsigned int bytes);   // counted by the analysis (the speed model)

static __forceinline__ void __emu_async_complete(const __EmuAsyncCopy& c)
{
    if (c.zfill < c.size) __emu_async_copied(c.size - c.zfill);
    if (c.zfill == 0 || c.zfill == c.size) {     // whole-width accesses, as the hardware makes them
        const bool zero = c.zfill != 0;
        switch (c.size) {
        case 4: __emu_async_move<unsigned int>(c.dst, c.src, zero); return;
        case 8: __emu_async_move<uint2>(c.dst, c.src, zero); return;
        default: __emu_async_move<uint4>(c.dst, c.src, zero); return;
        }
    }
    const unsigned int n = c.size - c.zfill;
    for (unsigned int i = 0; i < c.size; ++i)
        static_cast<unsigned char*>(c.dst)[i] = i < n ? static_cast<const unsigned char*>(c.src)[i] : 0;
}

static __forceinline__ void __pipeline_memcpy_async(void* dst_shared, const void* src_global, size_t size_and_align,
                                           size_t zfill = 0)
{
    if (size_and_align != 4 && size_and_align != 8 && size_and_align != 16) {
        printf("__pipeline_memcpy_async: size_and_align must be 4, 8 or 16, not %zu\n", size_and_align);
        __trap();
    }
    if (zfill > size_and_align) {
        printf("__pipeline_memcpy_async: zfill (%zu) is larger than size_and_align (%zu)\n", zfill, size_and_align);
        __trap();
    }
    __EmuAsyncQueue& q = __emu_async_queue();
    if (q.count == sizeof q.copies / sizeof q.copies[0]) {
        printf("__pipeline_memcpy_async: more than %zu copies in flight in one thread\n",
               sizeof q.copies / sizeof q.copies[0]);
        __trap();
    }
    q.copies[q.count++] = {dst_shared, src_global, (unsigned int)size_and_align, (unsigned int)zfill, q.committed};
}

static __forceinline__ void __pipeline_commit() { ++__emu_async_queue().committed; }

static __forceinline__ void __pipeline_wait_prior(size_t n)
{
    __EmuAsyncQueue& q = __emu_async_queue();
    const unsigned int done_below = q.committed > n ? q.committed - (unsigned int)n : 0;
    unsigned int kept = 0;
    for (unsigned int i = 0; i < q.count; ++i) {
        if (q.copies[i].batch < done_below) __emu_async_complete(q.copies[i]);
        else q.copies[kept++] = q.copies[i];
    }
    q.count = kept;
}
