// Top-2 reduction: the two smallest entries of a float array x[0..n) at two
// distinct positions, ties to the smaller index, in one fully parallel pass.
//
// Keys. For non-negative floats the IEEE-754 bit patterns order like unsigned
// integers, so key = (float bits << 32) | index, an unsigned long long, orders
// by value first and index second: "smallest key" is exactly "smallest value,
// ties to the smaller index", and two different positions always have two
// different keys. The empty key is ~0ull (larger than any real key).
//
// Three levels, each keeping a sorted pair (k1 < k2):
//  1. thread: a grid-stride loop over x, float4 loads (x is 16-byte aligned:
//     it comes from cuMemAlloc), then a scalar tail; insert() each key;
//  2. warp: five __shfl_down_sync steps merge the lanes' pairs; block: lane 0
//     of each warp stores its pair in shared memory, __syncthreads(), and warp
//     0 merges those pairs the same way;
//  3. grid: thread 0 of each block merges its pair into out[0] < out[1] (set to
//     ~0ull by the host before the launch) with two 64-bit atomicMin: the key
//     that loses against out[0] (the old minimum, or our k1) is offered to
//     out[1], and so is k2. Every key except the global minimum is offered to
//     out[1] once, so out[1] ends as the second smallest key.
// Work: n key comparisons, read once; one launch; 16 bytes go back to the host.
// Launch: blocks of TOP2_THREADS (a multiple of 32, at most 1024) threads,
// any number of blocks (the grid-stride loop covers the rest).
#ifndef TOP2_THREADS
#define TOP2_THREADS 256
#endif

typedef unsigned long long top2_key;
#define EMPTY_KEY (~0ull)

__device__ __forceinline__ top2_key make_key(float v, unsigned int i)
{
    return ((top2_key)__float_as_uint(v) << 32) | (top2_key)i;
}

// Insert key k into the sorted pair (k1 < k2).
__device__ __forceinline__ void insert(top2_key k, top2_key& k1, top2_key& k2)
{
    if (k < k1) { k2 = k1; k1 = k; }
    else if (k < k2) { k2 = k; }
}

// Merge the sorted pair (b1 < b2) into the sorted pair (a1 < a2).
__device__ __forceinline__ void merge(top2_key& a1, top2_key& a2, top2_key b1, top2_key b2)
{
    top2_key lo = a1 < b1 ? a1 : b1;
    top2_key hi = a1 < b1 ? b1 : a1;
    top2_key second = a2 < b2 ? a2 : b2;
    a2 = hi < second ? hi : second;
    a1 = lo;
}

__device__ __forceinline__ void warp_merge(top2_key& k1, top2_key& k2)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        top2_key b1 = __shfl_down_sync(0xffffffffu, k1, offset);
        top2_key b2 = __shfl_down_sync(0xffffffffu, k2, offset);
        merge(k1, k2, b1, b2);
    }
}

__global__ void top2(const float* x, int n, top2_key* out)
{
    __shared__ top2_key s1[32], s2[32];
    top2_key k1 = EMPTY_KEY, k2 = EMPTY_KEY;
    const int stride = gridDim.x * blockDim.x;
    const int first = blockIdx.x * blockDim.x + threadIdx.x;

    // 1. Thread level: float4 body, then the last n % 4 elements.
    const int n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int i = first; i < n4; i += stride) {
        float4 v = x4[i];
        insert(make_key(v.x, 4 * i), k1, k2);
        insert(make_key(v.y, 4 * i + 1), k1, k2);
        insert(make_key(v.z, 4 * i + 2), k1, k2);
        insert(make_key(v.w, 4 * i + 3), k1, k2);
    }
    for (int i = 4 * n4 + first; i < n; i += stride)
        insert(make_key(x[i], i), k1, k2);

    // 2. Warp level, then block level through shared memory.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    warp_merge(k1, k2);
    if (lane == 0) { s1[warp] = k1; s2[warp] = k2; }
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x / 32;
        k1 = lane < warps ? s1[lane] : EMPTY_KEY;
        k2 = lane < warps ? s2[lane] : EMPTY_KEY;
        warp_merge(k1, k2);
        // 3. Grid level: two 64-bit atomicMin on the global pair.
        if (lane == 0) {
            top2_key old = atomicMin(&out[0], k1);
            atomicMin(&out[1], old > k1 ? old : k1);
            atomicMin(&out[1], k2);
        }
    }
}
