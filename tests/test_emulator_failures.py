"""Kernels that would hang or fault a GPU: on the emulator each ends in a clear
error within the time limit, and the process (and the next launch) survives."""
import time

import numpy as np
import pytest
from conftest import emulator_only

pytestmark = emulator_only


@pytest.fixture
def short_timeout():
    from grader import emulator
    before = emulator.launch_timeout()
    emulator.set_launch_timeout(1.0)
    yield
    emulator.set_launch_timeout(before)


def _still_works(cuda, source_module):
    mod = source_module("__global__ void ok(int* v) { v[threadIdx.x] = threadIdx.x; }")
    v = np.zeros(8, np.int32)
    mod.get_function("ok")(cuda.Out(v), block=(8, 1, 1))
    assert np.array_equal(v, np.arange(8))


def test_time_limit_holds_after_many_launches_under_a_longer_one(cuda, source_module):
    """The watchdog is not woken at each launch; a shorter limit after many
    launches under a long one still ends an endless loop on time."""
    from grader import emulator
    before = emulator.launch_timeout()
    mod = source_module("""
    __global__ void spin(volatile int* flag, int forever) {
        while (forever && *flag == 0) { }
    }""")
    flag = cuda.to_device(np.zeros(1, np.int32))
    try:
        emulator.set_launch_timeout(60.0)
        for _ in range(300):
            mod.get_function("spin")(flag, np.int32(0), block=(32, 1, 1))
        emulator.set_launch_timeout(1.0)
        start = time.perf_counter()
        with pytest.raises(cuda.LaunchError, match="time limit"):
            mod.get_function("spin")(flag, np.int32(1), block=(32, 1, 1))
        assert time.perf_counter() - start < 3.0
    finally:
        emulator.set_launch_timeout(before)
    _still_works(cuda, source_module)


def test_kernels_that_never_wait_run_without_fibers_with_the_same_semantics(cuda, source_module):
    """A module that calls no barrier or warp primitive runs each block's threads
    one after the other on one stack: every thread still sees its own indices,
    its own locals, the thread order seed, and a fault names its thread."""
    from grader import emulator
    plain = source_module("""
    __global__ void k(int* out, int* ticket) {
        int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
        int b = blockIdx.y * gridDim.x + blockIdx.x;
        int local[40];
        for (int i = 0; i < 40; i++) local[i] = t * 40 + i;
        int s = 0;
        for (int i = 0; i < 40; i++) s += local[i];
        out[b * 60 + t] = s + 100000 * b;
        atomicAdd(ticket, 1);
    }""")
    waiting = [source_module("__global__ void k(int* o) { __syncthreads(); o[threadIdx.x] = 1; }"),
               source_module("__global__ void k(int* o) { o[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1, 1); }")]
    assert plain._loaded.sequential and not any(m._loaded.sequential for m in waiting)
    expected = np.array([[sum(range(t * 40, t * 40 + 40)) + 100000 * b for t in range(60)] for b in range(6)])
    for seed in (0, 99):
        emulator.set_thread_order_seed(seed)
        try:
            out = np.full(6 * 60, -1, np.int32)
            ticket = np.zeros(1, np.int32)
            plain.get_function("k")(cuda.Out(out), cuda.InOut(ticket), block=(5, 4, 3), grid=(3, 2))
        finally:
            emulator.set_thread_order_seed(0)
        assert np.array_equal(out.reshape(6, 60), expected) and ticket[0] == 360
    wild = source_module("""
    __global__ void wild(float* x) {
        float* p = (float*)0x10;
        if (blockIdx.x == 1 && threadIdx.x == 7) x[0] = p[0];
    }""")
    assert wild._loaded.sequential
    with pytest.raises(cuda.LaunchError, match=r"block \(1,0,0\), thread \(7,0,0\): illegal memory access"):
        wild.get_function("wild")(cuda.mem_alloc(128), block=(32, 1, 1), grid=(2, 1))
    _still_works(cuda, source_module)


def test_a_waiting_call_in_a_launch_without_fibers_is_an_error_not_a_crash(cuda, source_module):
    """Nor a launch error: the checks would take it for the kernel's; any other error is the grader's."""
    mod = source_module("__global__ void k(int* o) { __syncthreads(); o[threadIdx.x] = 1; }")
    mod._loaded.sequential = True          # as if the module's imports had been misread
    try:
        with pytest.raises(RuntimeError, match="internal emulator error: __syncthreads") as raised:
            mod.get_function("k")(cuda.mem_alloc(128), block=(32, 1, 1))
        assert not isinstance(raised.value, cuda.Error)
    finally:
        mod._loaded.sequential = False
    _still_works(cuda, source_module)


def test_barrier_in_divergent_code(cuda, source_module, short_timeout):
    mod = source_module("""
    __global__ void tiled(float* x, int n) {
        __shared__ float s[64];
        int t = threadIdx.x;
        if (t < n) {                // threads past n skip the barrier
            s[t] = x[t];
            __syncthreads();
            x[t] = s[n - 1 - t];
        }
    }""")
    x = cuda.to_device(np.ones(64, np.float32))
    start = time.perf_counter()
    with pytest.raises(cuda.LaunchError) as err:
        mod.get_function("tiled")(x, np.int32(40), block=(64, 1, 1))
    assert time.perf_counter() - start < 1.0
    message = str(err.value)
    assert "tiled" in message and "divergent barrier" in message and "line 7" in message
    assert err.value.kind == "deadlock"
    _still_works(cuda, source_module)


def test_early_return_before_barrier(cuda, source_module):
    mod = source_module("""
    __global__ void k(float* x, int n) {
        __shared__ float s[32];
        if (threadIdx.x >= n) return;
        s[threadIdx.x] = x[threadIdx.x];
        __syncthreads();
        x[threadIdx.x] = s[0];
    }""")
    with pytest.raises(cuda.LaunchError, match=r"__syncthreads\(\) on line 6 is not reached"):
        mod.get_function("k")(cuda.to_device(np.ones(32, np.float32)), np.int32(20), block=(32, 1, 1))


def test_threads_at_different_barriers(cuda, source_module):
    mod = source_module("""
    __global__ void k(int* x) {
        if (threadIdx.x % 2) { __syncthreads(); x[threadIdx.x] = 1; }
        else { __syncthreads(); x[threadIdx.x] = 2; }
    }""")
    with pytest.raises(cuda.LaunchError, match="different __syncthreads"):
        mod.get_function("k")(cuda.mem_alloc(4 * 32), block=(32, 1, 1))


def test_shuffle_that_some_lanes_never_reach(cuda, source_module):
    mod = source_module("""
    __global__ void k(int* x) {
        int v = x[threadIdx.x];
        if (threadIdx.x < 16) v += __shfl_down_sync(0xffffffff, v, 1);
        __syncthreads();
        x[threadIdx.x] = v;
    }""")
    with pytest.raises(cuda.LaunchError, match="deadlock.*warp-synchronous call on line 4"):
        mod.get_function("k")(cuda.to_device(np.ones(32, np.int32)), block=(32, 1, 1))


def test_endless_loop_times_out(cuda, source_module, short_timeout):
    mod = source_module("""
    __global__ void spin(volatile int* flag) {
        while (*flag == 0) { }      // nobody ever sets it
    }""")
    start = time.perf_counter()
    with pytest.raises(cuda.LaunchError) as err:
        mod.get_function("spin")(cuda.to_device(np.zeros(1, np.int32)), block=(32, 1, 1), grid=(2, 1))
    elapsed = time.perf_counter() - start
    assert 0.9 < elapsed < 3.0
    assert err.value.kind == "timeout" and "spin" in str(err.value) and "time limit" in str(err.value)
    _still_works(cuda, source_module)


def test_endless_loop_with_barriers_times_out(cuda, source_module, short_timeout):
    mod = source_module("""
    __global__ void spin(int* x) {
        __shared__ int s;
        for (;;) { s = x[0]; __syncthreads(); }
    }""")
    with pytest.raises(cuda.LaunchError, match="time limit"):
        mod.get_function("spin")(cuda.to_device(np.zeros(1, np.int32)), block=(64, 1, 1))


def test_illegal_address_is_reported(cuda, source_module):
    mod = source_module("""
    __global__ void wild(float* x) {
        float* p = (float*)0x10;
        x[threadIdx.x] = p[threadIdx.x];
    }""")
    with pytest.raises(cuda.LaunchError, match="illegal memory access") as err:
        mod.get_function("wild")(cuda.mem_alloc(128), block=(32, 1, 1), grid=(2, 1))
    assert err.value.kind == "fault" and "block (0,0,0), thread (0,0,0)" in str(err.value)
    _still_works(cuda, source_module)


def test_stack_overflow_is_reported(cuda, source_module):
    mod = source_module("""
    __global__ void k(int* x, int n) {
        volatile float big[1 << 20];            // 4 MB of locals per thread
        for (int i = 0; i < n; i += 1024) big[i] = i;
        x[threadIdx.x] = big[n - 1];
    }
    """)
    with pytest.raises(cuda.LaunchError, match="stack overflow"):
        mod.get_function("k")(cuda.mem_alloc(4 * 32), np.int32(1 << 20), block=(32, 1, 1))
    _still_works(cuda, source_module)


def test_device_assert(cuda, source_module):
    mod = source_module("""
    #include <cassert>
    __global__ void k(const int* x) { assert(x[threadIdx.x] >= 0); }
    """)
    v = np.zeros(32, np.int32)
    v[5] = -1
    with pytest.raises(cuda.LaunchError, match=r"thread \(5,0,0\): assertion failed.*kernel.cu:3") as err:
        mod.get_function("k")(cuda.In(v), block=(32, 1, 1))
    assert err.value.kind == "trap"


def test_uninitialised_shared_memory_reads_nan(cuda, source_module):
    # The GPU leaves shared memory uninitialised; the emulator fills it with
    # NaN at each block start so that a forgotten load shows.
    mod = source_module("""
    __global__ void k(float* out) {
        __shared__ float s[64];
        if (threadIdx.x < 32) s[threadIdx.x] = 1.0f;
        __syncthreads();
        out[blockIdx.x * 64 + threadIdx.x] = s[threadIdx.x];
    }""")
    out = np.zeros(128, np.float32)
    mod.get_function("k")(cuda.Out(out), block=(64, 1, 1), grid=(2, 1))
    assert (out.reshape(2, 64)[:, :32] == 1).all() and np.isnan(out.reshape(2, 64)[:, 32:]).all()


def test_compile_error_has_student_line_numbers(cuda, source_module):
    source = "__global__ void k(float* x)\n{\n    x[threadIdx.x] = undefined_name;\n}\n"
    with pytest.raises(cuda.CompileError, match=r"kernel\.cu(:3:|\(3\)).*undefined_name"):
        source_module(source)


def test_emulator_rejects_wrong_argument_size(cuda, source_module):
    f = source_module("__global__ void k(float* v, float a) { v[0] = a; }").get_function("k")
    with pytest.raises(TypeError, match=r"argument 1 of k\(float\*, float\).*numpy.float64"):
        f(cuda.mem_alloc(4), np.float64(1.0), block=(1, 1, 1))


def test_permuted_thread_order_gives_same_result_for_correct_kernel(cuda, source_module):
    from grader import emulator
    mod = source_module("""
    __global__ void reverse(int* a) {
        __shared__ int s[128];
        s[threadIdx.x] = a[threadIdx.x];
        __syncthreads();
        a[threadIdx.x] = s[127 - threadIdx.x];
    }""")
    emulator.set_thread_order_seed(12345)
    try:
        a = np.arange(128, dtype=np.int32)
        mod.get_function("reverse")(cuda.InOut(a), block=(128, 1, 1))
    finally:
        emulator.set_thread_order_seed(0)
    assert np.array_equal(a, np.arange(128)[::-1])


def test_permuted_thread_order_keeps_warps_and_thread_indices(cuda, source_module):
    """With a thread-order seed the threads of each block run in another order
    (seen in the order they take tickets), and each keeps its own threadIdx and
    warp: a shuffle reduction per warp and a barrier still give every block's sum."""
    from grader import emulator
    mod = source_module("""
    __global__ void k(int* ticket, int* order, int* sums, int* ids) {
        int t = threadIdx.y * blockDim.x + threadIdx.x;
        int b = blockIdx.x;
        order[b * 96 + atomicAdd(&ticket[b], 1)] = t;
        int v = t + 1000 * b;
        for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
        __shared__ int part[3];
        if (t % 32 == 0) part[t / 32] = v;
        __syncthreads();
        if (t == 0) sums[b] = part[0] + part[1] + part[2];
        ids[b * 96 + t] = t;
    }""")
    blocks = 3
    ticket = np.zeros(blocks, np.int32)
    order = np.full(blocks * 96, -1, np.int32)
    sums = np.full(blocks, -1, np.int32)
    ids = np.full(blocks * 96, -1, np.int32)
    emulator.set_thread_order_seed(777)
    try:
        mod.get_function("k")(cuda.InOut(ticket), cuda.Out(order), cuda.Out(sums), cuda.Out(ids),
                              block=(32, 3, 1), grid=(blocks, 1))
    finally:
        emulator.set_thread_order_seed(0)
    order = order.reshape(blocks, 96)
    assert all(sorted(row) == list(range(96)) for row in order)
    assert any(list(row) != list(range(96)) for row in order)        # permuted
    assert len({tuple(row) for row in order}) > 1                     # and differently per block
    assert list(sums) == [sum(range(96)) + 96 * 1000 * b for b in range(blocks)]
    assert np.array_equal(ids, np.tile(np.arange(96), blocks))



def test_the_abi_version_is_checked_on_load_and_matches_the_header(monkeypatch):
    """grader/emulator/runtime/emu_abi.h's kAbiVersion is what binding.py reads; a module built for
    another version is refused with a message that says what to do."""
    import re
    from pathlib import Path

    from grader.emulator import binding, build
    header = (Path(binding.__file__).parent / "runtime" / "emu_abi.h").read_text()
    assert int(re.search(r"kAbiVersion = (\d+);", header).group(1)) == binding.ABI_VERSION
    built = build.build_module("__global__ void k(float* x) { x[0] = 1.0f; }")
    assert "k" in binding.LoadedModule(built).kernels
    monkeypatch.setattr(binding, "ABI_VERSION", binding.ABI_VERSION + 1)
    with pytest.raises(binding.AbiMismatch, match="delete the emulator's cache"):
        binding.LoadedModule(built)
