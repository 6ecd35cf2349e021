"""One test per CUDA feature the labs rely on. Each kernel's result depends on
the feature working: they pass on a real GPU and on the emulator alike."""
import numpy as np
import pytest
from conftest import ON_EMULATOR

from grader.kernels import sgemm


def test_builtin_indices_in_3d(cuda, source_module):
    mod = source_module("""
    __global__ void ids(int* out) {
        int bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        int nthreads = blockDim.x * blockDim.y * blockDim.z;
        int g = bx * nthreads + t;
        out[4 * g + 0] = threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z;
        out[4 * g + 1] = blockIdx.x + 10 * blockIdx.y + 100 * blockIdx.z;
        out[4 * g + 2] = blockDim.x + 10 * blockDim.y + 100 * blockDim.z + 1000 * warpSize;
        out[4 * g + 3] = gridDim.x + 10 * gridDim.y + 100 * gridDim.z;
    }""")
    block, grid = (3, 2, 4), (2, 3, 2)
    n = np.prod(block) * np.prod(grid)
    out = np.full(4 * n, -7, np.int32)
    mod.get_function("ids")(cuda.Out(out), block=block, grid=grid)
    out = out.reshape(grid[2], grid[1], grid[0], block[2], block[1], block[0], 4)
    bz, by, bx, tz, ty, tx = np.indices(out.shape[:6])
    assert (out[..., 0] == tx + 10 * ty + 100 * tz).all()
    assert (out[..., 1] == bx + 10 * by + 100 * bz).all()
    assert (out[..., 2] == 3 + 20 + 400 + 32000).all()
    assert (out[..., 3] == 2 + 30 + 200).all()


def test_syncthreads_orders_shared_memory(cuda, source_module):
    # Reversal through shared memory needs the barrier: without it, early
    # threads read slots that later threads have not written yet.
    mod = source_module("""
    __global__ void reverse(float* a) {
        __shared__ float s[256];
        int t = threadIdx.x;
        s[t] = a[blockIdx.x * 256 + t];
        __syncthreads();
        a[blockIdx.x * 256 + t] = s[255 - t];
    }""")
    a = np.random.rand(3 * 256).astype(np.float32)
    out = a.copy()
    mod.get_function("reverse")(cuda.InOut(out), block=(256, 1, 1), grid=(3, 1))
    assert np.array_equal(out, a.reshape(3, 256)[:, ::-1].ravel())


def test_syncthreads_count_and_or(cuda, source_module):
    mod = source_module("""
    __global__ void votes(const int* v, int* out) {
        int p = v[threadIdx.x];
        int c = __syncthreads_count(p);
        int a = __syncthreads_and(p);
        int o = __syncthreads_or(p);
        if (threadIdx.x == 0) { out[0] = c; out[1] = a; out[2] = o; }
    }""")
    v = (np.random.rand(96) < 0.3).astype(np.int32)
    out = np.zeros(3, np.int32)
    mod.get_function("votes")(cuda.In(v), cuda.Out(out), block=(96, 1, 1))
    assert list(out) == [v.sum(), int(v.all()), int(v.any())]


def test_dynamic_shared_memory(cuda, source_module):
    mod = source_module("""
    __global__ void reverse(float* a, int n) {
        extern __shared__ float s[];
        extern __shared__ __align__(16) float alias[];   // every extern array starts at the same place
        int t = threadIdx.x;
        s[t] = a[t];
        __syncthreads();
        a[t] = alias[n - 1 - t];
    }""")
    n = 200
    a = np.random.rand(n).astype(np.float32)
    out = a.copy()
    mod.get_function("reverse")(cuda.InOut(out), np.int32(n), block=(n, 1, 1), shared=4 * n)
    assert np.array_equal(out, a[::-1])


def test_asynchronous_copies_to_shared_memory(cuda, source_module):
    # The pipeline primitives (cp.async): 4- and 16-byte copies, zero fill,
    # batches completed by __pipeline_wait_prior, then a barrier for the block.
    mod = source_module("""
    extern "C++" {
    #include <cuda_pipeline.h>
    }
    __global__ void staged(const float* in, float* out, int n) {
        __shared__ __align__(16) float s[2][256];
        int t = threadIdx.x;
        __pipeline_memcpy_async(&s[0][t], &in[t], 4, t < n ? 0 : 4);
        __pipeline_commit();
        if (t < 64)
            __pipeline_memcpy_async(&s[1][4 * t], &in[256 + 4 * t], 16);
        __pipeline_commit();
        __pipeline_wait_prior(1);            // the first batch only
        __syncthreads();
        out[t] = s[0][255 - t];
        __pipeline_wait_prior(0);
        __syncthreads();
        out[256 + t] = s[1][255 - t];
    }""")
    data = np.arange(1, 513, dtype=np.float32)
    out = np.full(512, np.nan, np.float32)
    mod.get_function("staged")(cuda.In(data), cuda.Out(out), np.int32(200), block=(256, 1, 1))
    first = np.where(np.arange(256) < 200, data[:256], 0)
    assert (out[:256] == first[::-1]).all()
    assert (out[256:] == data[256:][::-1]).all()


@pytest.mark.skipif(not ON_EMULATOR, reason="reading before the wait is undefined on a GPU")
def test_asynchronous_copy_lands_only_at_the_wait(cuda, source_module):
    mod = source_module("""
    extern "C++" {
    #include <cuda_pipeline.h>
    }
    __global__ void early(const float* in, float* out) {
        __shared__ float s[32];
        s[threadIdx.x] = -1.0f;
        __pipeline_memcpy_async(&s[threadIdx.x], &in[threadIdx.x], 4);
        __pipeline_commit();
        out[threadIdx.x] = s[threadIdx.x];           // too early: the copy has not landed
        __pipeline_wait_prior(0);
        out[32 + threadIdx.x] = s[threadIdx.x];
    }""")
    data = np.arange(32, dtype=np.float32)
    out = np.zeros(64, np.float32)
    mod.get_function("early")(cuda.In(data), cuda.Out(out), block=(32, 1, 1))
    assert (out[:32] == -1).all() and (out[32:] == data).all()


@pytest.mark.skipif(not ON_EMULATOR, reason="a GPU's registers hold whatever they held")
@pytest.mark.parametrize("barrier", ["__syncthreads();", ""])
def test_a_local_read_before_it_is_written_holds_the_pattern_in_every_block(cuda, source_module, barrier):
    """A thread's locals start as the pattern of grader.emulator.build.LOCALS_PATTERN, not as what its stack held
    before (in a kernel without a barrier, whose threads run one after another on one stack: the previous
    thread's values): an accumulator the kernel forgot to set is named as such, whatever the thread order. (An
    array in memory: the compiler keeps what it can in registers, where an unset value is whatever it makes of
    it.)"""
    mod = source_module("""
    __device__ __noinline__ void fill(float* x, int n, float v) { for (int i = 0; i < n; ++i) x[i] += v; }
    __global__ void forgot(float* out) {
        float acc[8];                        // never set to zero
        BARRIER
        fill(acc, 8, 1.0f);
        out[blockIdx.x * blockDim.x + threadIdx.x] = acc[threadIdx.x % 8];
    }""".replace("BARRIER", barrier))
    out = np.zeros(4 * 64, np.float32)
    mod.get_function("forgot")(cuda.Out(out), block=(64, 1, 1), grid=(4, 1))
    assert (out.view(np.uint32) == sgemm.LOCALS_PATTERN_BITS).all(), out[:8]
    assert "a local variable never initialised" in sgemm.value_hint(out[0])


def test_constant_and_device_variables(cuda, source_module):
    mod = source_module("""
    __constant__ float coeff[4];
    __device__ int offset;
    __global__ void poly(float* y, const float* x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = coeff[0] + x[i] * (coeff[1] + x[i] * (coeff[2] + x[i] * coeff[3])) + offset;
    }""")
    c = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    ptr, size = mod.get_global("coeff")
    assert size == 16
    cuda.memcpy_htod(ptr, c)
    optr, osize = mod.get_global("offset")
    assert osize == 4
    cuda.memcpy_htod(optr, np.array([5], np.int32))
    x = np.random.rand(100).astype(np.float32)
    y = np.full(100, np.nan, np.float32)
    mod.get_function("poly")(cuda.Out(y), cuda.In(x), np.int32(100), block=(64, 1, 1), grid=(2, 1))
    assert np.allclose(y, c[0] + x * (c[1] + x * (c[2] + x * c[3])) + 5, rtol=1e-5)


def test_warp_shuffles(cuda, source_module):
    mod = source_module("""
    __global__ void shuffles(const int* v, int* out) {
        int lane = threadIdx.x % 32, x = v[threadIdx.x];
        int* o = out + 6 * threadIdx.x;
        o[0] = __shfl_sync(0xffffffff, x, 3);
        o[1] = __shfl_up_sync(0xffffffff, x, 2);
        o[2] = __shfl_down_sync(0xffffffff, x, 5);
        o[3] = __shfl_xor_sync(0xffffffff, x, 1);
        int sum = x;
        for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffff, sum, d);
        o[4] = sum;
        o[5] = __shfl_sync(0xffffffff, x, lane + 1, 16);   // width 16: wraps inside each half
    }""")
    v = np.random.randint(-1000, 1000, 64).astype(np.int32)
    out = np.zeros((64, 6), np.int32)
    mod.get_function("shuffles")(cuda.In(v), cuda.Out(out), block=(64, 1, 1))
    w = v.reshape(2, 32)
    lane = np.arange(32)
    expect = np.stack([
        np.repeat(w[:, 3:4], 32, 1),
        np.where(lane >= 2, w[:, np.maximum(lane - 2, 0)], w),
        np.where(lane + 5 < 32, w[:, np.minimum(lane + 5, 31)], w),
        w[:, lane ^ 1],
        np.repeat(w.sum(1, keepdims=True), 32, 1),
        w[:, (lane & ~15) + ((lane + 1) & 15)],
    ], axis=-1).reshape(64, 6)
    assert np.array_equal(out, expect)


def test_warp_votes(cuda, source_module):
    mod = source_module("""
    __global__ void votes(const int* p, unsigned* out) {
        int x = p[threadIdx.x];
        unsigned* o = out + 4 * threadIdx.x;
        o[0] = __ballot_sync(0xffffffff, x);
        o[1] = __any_sync(0xffffffff, x);
        o[2] = __all_sync(0xffffffff, x);
        __syncwarp();
        o[3] = __activemask();
    }""")
    p = (np.random.rand(64) < 0.5).astype(np.int32)
    p[32:] = 1
    out = np.zeros((64, 4), np.uint32)
    mod.get_function("votes")(cuda.In(p), cuda.Out(out), block=(64, 1, 1))
    ballot0 = int(sum(int(b) << i for i, b in enumerate(p[:32])))
    assert (out[:32, 0] == ballot0).all() and (out[32:, 0] == 0xFFFFFFFF).all()
    assert (out[:32, 1] == int(p[:32].any())).all() and (out[:32, 2] == int(p[:32].all())).all()
    assert (out[32:, 2] == 1).all()
    assert (out[:, 3] == 0xFFFFFFFF).all()


def test_atomics(cuda, source_module):
    mod = source_module("""
    __device__ float atomicMaxFloat(float* addr, float v) {
        int* a = (int*)addr; int old = *a, assumed;
        do { assumed = old; old = atomicCAS(a, assumed, __float_as_int(fmaxf(v, __int_as_float(assumed)))); }
        while (assumed != old);
        return __int_as_float(old);
    }
    __global__ void hist(const int* v, int n, int* bins, float* fsum, int* imax, unsigned* umin,
                         float* fmax, int* exch, int* sub) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= n) return;
        atomicAdd(&bins[v[i] % 8], 1);
        atomicAdd(fsum, 0.5f);
        atomicMax(imax, v[i]);
        atomicMin(umin, (unsigned)v[i]);
        atomicMaxFloat(fmax, v[i] * 0.25f);
        atomicExch(exch, 7);
        atomicSub(sub, 2);
    }""")
    n = 1000
    v = np.random.randint(0, 10000, n).astype(np.int32)
    bins, fsum, imax = np.zeros(8, np.int32), np.zeros(1, np.float32), np.full(1, -1, np.int32)
    umin, fmax = np.full(1, 2**32 - 1, np.uint32), np.full(1, -1.0, np.float32)
    exch, sub = np.zeros(1, np.int32), np.full(1, 5000, np.int32)
    mod.get_function("hist")(cuda.In(v), np.int32(n), cuda.InOut(bins), cuda.InOut(fsum), cuda.InOut(imax),
                             cuda.InOut(umin), cuda.InOut(fmax), cuda.InOut(exch), cuda.InOut(sub),
                             block=(128, 1, 1), grid=(8, 1))
    assert np.array_equal(bins, np.bincount(v % 8, minlength=8))
    assert fsum[0] == 500.0 and imax[0] == v.max() and umin[0] == v.min()
    assert fmax[0] == v.max() * 0.25 and exch[0] == 7 and sub[0] == 5000 - 2 * n


def test_math_and_bit_intrinsics(cuda, source_module):
    mod = source_module("""
    __global__ void intrinsics(const float* x, float* f, int* i) {
        int t = threadIdx.x;
        float a = __ldg(&x[t]) + 1.0f;
        f[8 * t + 0] = fmaf(a, 2.0f, 1.0f);
        f[8 * t + 1] = fminf(a, 1.5f);
        f[8 * t + 2] = fmaxf(a, 1.5f);
        f[8 * t + 3] = rsqrtf(a);
        f[8 * t + 4] = __fdividef(1.0f, a);
        f[8 * t + 5] = __int_as_float(__float_as_int(a));
        f[8 * t + 6] = sqrtf(a) + expf(-a) + min(a, 1.25f) + max(t, 3);
        f[8 * t + 7] = __saturatef(a - 1.5f);
        i[4 * t + 0] = __popc(t * 2654435761u);
        i[4 * t + 1] = __clz(t + 1);
        i[4 * t + 2] = __ffs(t);
        i[4 * t + 3] = (int)__brev((unsigned)t);
    }""")
    x = np.random.rand(32).astype(np.float32)
    f = np.zeros((32, 8), np.float32)
    ints = np.zeros((32, 4), np.int32)
    mod.get_function("intrinsics")(cuda.In(x), cuda.Out(f), cuda.Out(ints), block=(32, 1, 1))
    a = x + np.float32(1)
    t = np.arange(32)
    expect = np.stack([a * 2 + 1, np.minimum(a, 1.5), np.maximum(a, 1.5), 1 / np.sqrt(a), 1 / a, a,
                       np.sqrt(a) + np.exp(-a) + np.minimum(a, 1.25) + np.maximum(t, 3), np.clip(a - 1.5, 0, 1)], 1)
    assert np.allclose(f, expect, rtol=1e-5)
    t = [int(v) for v in t]
    assert list(ints[:, 0]) == [bin(v * 2654435761 % 2**32).count("1") for v in t]
    assert list(ints[:, 1]) == [32 - (v + 1).bit_length() for v in t]
    assert list(ints[:, 2]) == [(v & -v).bit_length() for v in t]
    assert list(ints[:, 3].view(np.uint32)) == [int(f"{v:032b}"[::-1], 2) for v in t]


def test_vector_types(cuda, source_module):
    mod = source_module("""
    __global__ void vec(const float* x, float* y, int* sizes) {
        int t = threadIdx.x;
        float4 v = reinterpret_cast<const float4*>(x)[t];
        float4 w = make_float4(v.w, v.z, v.y, v.x);
        reinterpret_cast<float4*>(y)[t] = w;
        int2 p = make_int2(t, -t);
        int4 q = make_int4(p.x, p.y, 1, 2);
        float2 r = make_float2(1.0f, 2.0f);
        if (t == 0) {
            sizes[0] = sizeof(float4); sizes[1] = alignof(float4); sizes[2] = sizeof(int2);
            sizes[3] = alignof(int4) + q.z + q.w + (int)r.y;
        }
    }""")
    x = np.random.rand(64 * 4).astype(np.float32)
    y = np.zeros_like(x)
    sizes = np.zeros(4, np.int32)
    mod.get_function("vec")(cuda.In(x), cuda.Out(y), cuda.Out(sizes), block=(64, 1, 1))
    assert np.array_equal(y.reshape(64, 4), x.reshape(64, 4)[:, ::-1])
    assert list(sizes) == [16, 16, 8, 16 + 1 + 2 + 2]


def test_templates_lambdas_device_functions(cuda, source_module):
    # Templates cannot have C linkage: such modules are built with no_extern_c.
    mod = source_module("""
    template <int N> __device__ __forceinline__ float sum_n(const float* __restrict__ p) {
        float s = 0.0f;
        #pragma unroll
        for (int i = 0; i < N; ++i) s += p[i];
        return s;
    }
    __device__ float twice(float v) { return 2.0f * v; }
    extern "C" __global__ void __launch_bounds__(128) work(const float* __restrict__ x, float* __restrict__ y) {
        auto scale = [](float v, float k) { return v * k; };
        int t = threadIdx.x;
        y[t] = scale(twice(sum_n<4>(x + 4 * t)), 0.5f);
    }""", no_extern_c=True)
    x = np.random.rand(128 * 4).astype(np.float32)
    y = np.zeros(128, np.float32)
    mod.get_function("work")(cuda.In(x), cuda.Out(y), block=(128, 1, 1))
    assert np.allclose(y, x.reshape(128, 4).sum(1), rtol=1e-6)


def test_template_kernel_without_extern_c(cuda, source_module):
    mod = source_module("""
    template <int SCALE> __global__ void scale(int* v) { v[threadIdx.x] *= SCALE; }
    template __global__ void scale<3>(int*);
    """, no_extern_c=True)
    v = np.arange(32, dtype=np.int32)
    mod.get_function("_Z5scaleILi3EEvPi")(cuda.InOut(v), block=(32, 1, 1))
    assert np.array_equal(v, 3 * np.arange(32))


def test_a_kernel_with_cpp_linkage_is_found_by_its_mangled_name_only(cuda, source_module):
    # PyCUDA on a GPU finds it so: the plain name passing here and failing there would mislead
    mod = source_module("__global__ void twice(int* v) { v[threadIdx.x] *= 2; }", no_extern_c=True)
    with pytest.raises(cuda.LogicError) as e:
        mod.get_function("twice")
    assert "named symbol not found" in str(e.value)
    if ON_EMULATOR:
        assert "symbol is '_Z5twicePi': declare it extern \"C\" __global__" in str(e.value), str(e.value)
    v = np.arange(32, dtype=np.int32)
    mod.get_function("_Z5twicePi")(cuda.InOut(v), block=(32, 1, 1))
    assert np.array_equal(v, 2 * np.arange(32))


def test_options_and_include_dirs(cuda, source_module, tmp_path):
    (tmp_path / "params.h").write_text("#define OFFSET 40\n")
    mod = source_module("""
    #include "params.h"
    __global__ void k(int* v) { v[threadIdx.x] = FACTOR * threadIdx.x + OFFSET; }
    """, options=["-DFACTOR=3"], include_dirs=[str(tmp_path)])
    v = np.zeros(16, np.int32)
    mod.get_function("k")(cuda.Out(v), block=(16, 1, 1))
    assert np.array_equal(v, 3 * np.arange(16) + 40)


def test_printf_reaches_stdout(cuda, source_module, capfd):
    mod = source_module("""
    #include <cstdio>
    __global__ void hello(int v) { if (threadIdx.x == 1) printf("hello from thread %d: %d\\n", threadIdx.x, v); }
    """)
    mod.get_function("hello")(np.int32(42), block=(4, 1, 1))
    cuda.Context.synchronize()
    assert "hello from thread 1: 42" in capfd.readouterr().out


def test_prepared_call_and_gpuarray(cuda, source_module):
    import pycuda.gpuarray as gpuarray
    mod = source_module("""
    __global__ void axpy(float a, const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] += a * x[i];
    }""")
    f = mod.get_function("axpy").prepare([np.float32, np.intp, np.intp, np.int32])
    n = 300
    x, y = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    x_gpu, y_gpu = gpuarray.to_gpu(x), gpuarray.to_gpu(y)
    f.prepared_call((3, 1), (128, 1, 1), np.float32(2.0), x_gpu.gpudata, y_gpu.gpudata, np.int32(n))
    assert np.allclose(y_gpu.get(), y + 2 * x)
    timed = f.prepared_timed_call((3, 1), (128, 1, 1), np.float32(1.0), x_gpu.gpudata, y_gpu.gpudata, np.int32(n))
    assert timed() > 0
    assert np.allclose(y_gpu.get(), y + 3 * x, rtol=1e-6)
    z = gpuarray.zeros((4, 5), np.float32)
    assert z.shape == (4, 5) and not z.get().any()
    e = gpuarray.empty(7, np.int32)
    e.fill(3)
    assert (e.get() == 3).all() and len(e) == 7


def test_memory_api(cuda):
    a = np.arange(100, dtype=np.float32)
    d = cuda.to_device(a)
    d2 = cuda.mem_alloc(a.nbytes)
    cuda.memcpy_dtod(d2, d, a.nbytes)
    assert np.array_equal(cuda.from_device(d2, (100,), np.float32), a)
    cuda.memset_d32(d2, 0, 100)
    assert not cuda.from_device_like(d2, a).any()
    free, total = cuda.mem_get_info()
    assert 0 < free <= total


def test_events_time_a_launch(cuda, source_module):
    mod = source_module("__global__ void spin(float* x) { for (int i = 0; i < 1000; ++i) x[threadIdx.x] += 1.0f; }")
    x = cuda.to_device(np.zeros(64, np.float32))
    start, end = cuda.Event(), cuda.Event()
    start.record()
    mod.get_function("spin")(x, block=(64, 1, 1))
    end.record()
    end.synchronize()
    assert end.time_since(start) > 0


def test_device_and_function_attributes(cuda, source_module):
    dev = cuda.Device(0)
    assert dev.compute_capability() >= (7, 0)
    assert dev.get_attribute(cuda.device_attribute.MAX_THREADS_PER_BLOCK) == 1024
    assert dev.get_attribute(cuda.device_attribute.WARP_SIZE) == 32
    assert dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT) > 0
    assert isinstance(dev.name(), str)
    mod = source_module("""
    __global__ void tiles(float* x) {
        __shared__ float a[32][32]; __shared__ float b[32][32];
        a[threadIdx.y][threadIdx.x] = x[threadIdx.x]; b[threadIdx.x][threadIdx.y] = 1.0f;
        __syncthreads();
        x[threadIdx.x] = a[threadIdx.x][threadIdx.y] + b[threadIdx.y][threadIdx.x];
    }""")
    f = mod.get_function("tiles")
    if not ON_EMULATOR or f.resources_known:
        assert f.shared_size_bytes == 2 * 32 * 32 * 4
        assert f.num_regs > 0


def test_too_many_threads_is_rejected(cuda, source_module):
    f = source_module("__global__ void k(int* v) { v[0] = 1; }").get_function("k")
    v = cuda.mem_alloc(4)
    with pytest.raises(cuda.LogicError):
        f(v, block=(1024, 2, 1))


def test_python_int_argument_is_rejected(cuda, source_module):
    f = source_module("__global__ void k(int* v, int n) { v[0] = n; }").get_function("k")
    with pytest.raises(TypeError):
        f(cuda.mem_alloc(4), 5, block=(1, 1, 1))


def test_runtime_library_exports_only_its_interface():
    """The runtime is loaded RTLD_GLOBAL; C++ library code it instantiates must stay
    local, or it replaces those symbols in extension modules imported later (on the
    H200 machine, matplotlib's ft2font then failed to import after an emulated launch)."""
    import re
    import subprocess

    from grader.emulator.build import runtime_library
    nm = subprocess.run(["nm", "-D", "--defined-only", "-C", str(runtime_library())],
                        capture_output=True, text=True, check=True).stdout
    names = [line.split(maxsplit=2)[2] for line in nm.splitlines() if line.count(" ") >= 2]
    interface = re.compile(r"(emu_|__emu_|__asan_|atomic\w+\(|(threadIdx|blockIdx|blockDim|gridDim)$)")
    assert "emu_launch" in names and "__emu_syncthreads" in names
    assert [n for n in names if not interface.match(n)] == []


@pytest.mark.skipif(not ON_EMULATOR, reason="the emulator's builds")
@pytest.mark.parametrize("kind", ["runs", "analysed"])
def test_builds_start_from_the_precompiled_runtime_header(kind, tmp_path):
    """A build of either kind finds cuda_emu.h precompiled for its flags, and the compiler takes it (g++ -H
    marks a precompiled header it uses with "!", one it finds unfit with "x")."""
    import subprocess

    from grader.emulator import build
    flags = build.HEADER_KINDS[kind]
    (tmp_path / "unit.cpp").write_text(build._user_unit(build.policy.BASELINE_SOURCE, False))
    p = subprocess.run([build.cxx(), "-H", "-fsyntax-only", *build._header_flags(flags),
                        *build._flags(flags, [], []), "unit.cpp"], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines()[0].startswith(f"! {build.precompiled_headers() / kind}/cuda_emu.h.gch"), p.stderr[:300]


@pytest.mark.skipif(not ON_EMULATOR, reason="the emulator's builds")
def test_a_cache_without_room_for_the_precompiled_header_builds_from_the_header(grader_settings, tmp_path):
    """Where the precompiled header cannot be made (here its folder's name is taken by a file; elsewhere, a
    cache this process may only read), a build reads the header itself, and nothing fails."""
    from grader.emulator import build
    name = build.precompiled_headers().name
    (tmp_path / name).write_text("not a folder")
    grader_settings(emulator_cache=str(tmp_path))
    assert [build._header_flags(flags) for flags in build.HEADER_KINDS.values()] == [[], []]
