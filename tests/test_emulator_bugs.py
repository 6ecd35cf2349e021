"""Ways the emulator could give answers no GPU gives: a kernel named like a C
library function ran the library function, launches from two host threads at
once crashed, a Fortran-ordered array was stored row-major, and a store into a
buffer that the host happened to place beside the block's shared arrays was
reported as a shared-memory index out of bounds, and a kernel built before one of
the emulator's CUDA headers changed was loaded after it.
Each program runs in a fresh process, so a crash or a hang fails the test
instead of ending the test run."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ON_EMULATOR

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not ON_EMULATOR, reason="runs programs on the emulator")


def run_program(body: str, timeout: float = 120) -> str:
    """Runs `body` on the emulator in a fresh process; returns its stdout."""
    program = "from grader import emulator\nemulator.install()\n" + textwrap.dedent(body)
    try:
        p = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the program did not finish within {timeout} s")
    assert p.returncode == 0, f"exit status {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.mark.parametrize("name", ["step", "index", "sleep", "read", "advance"])
def test_kernel_named_like_a_libc_function_runs_the_kernel(name):
    out = run_program(f"""
        import numpy as np
        import pycuda.autoinit
        import pycuda.driver as drv
        from pycuda.compiler import SourceModule
        mod = SourceModule('''
        __global__ void {name}(float* out, const float* a, int n) {{
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) out[i] = 2.0f * a[i] + 1.0f;
        }}''')
        n = 1000
        a = np.random.default_rng(1).standard_normal(n).astype(np.float32)
        out = np.full(n, np.nan, np.float32)
        mod.get_function("{name}")(drv.Out(out), drv.In(a), np.int32(n), block=(128, 1, 1), grid=(8, 1))
        assert np.array_equal(out, 2 * a + 1), out[:8]
        print("ok")
    """, timeout=60)
    assert out.strip().endswith("ok")


def test_device_function_named_like_a_libc_function_is_called():
    out = run_program("""
        import numpy as np
        import pycuda.autoinit
        import pycuda.driver as drv
        from pycuda.compiler import SourceModule
        mod = SourceModule('''
        __device__ float step(float x) { return x > 0.0f ? 3.0f : -5.0f; }
        __device__ int index(int i) { return 7 * i; }
        __global__ void apply(float* out, int* idx, const float* a, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) { out[i] = step(a[i]); idx[i] = index(i); }
        }''')
        n = 300
        a = np.random.default_rng(2).standard_normal(n).astype(np.float32)
        out = np.full(n, np.nan, np.float32)
        idx = np.full(n, -1, np.int32)
        mod.get_function("apply")(drv.Out(out), drv.Out(idx), drv.In(a), np.int32(n), block=(64, 1, 1), grid=(5, 1))
        assert np.array_equal(out, np.where(a > 0, 3.0, -5.0).astype(np.float32))
        assert np.array_equal(idx, 7 * np.arange(n))
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_two_host_threads_launching_at_once():
    out = run_program("""
        import threading
        import numpy as np
        import pycuda.autoinit
        import pycuda.driver as drv
        from pycuda.compiler import SourceModule
        mod = SourceModule('''
        __global__ void scale(float* out, const float* a, int n) {
            __shared__ float s[128];
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            s[threadIdx.x] = i < n ? a[i] : 0.0f;
            __syncthreads();
            if (i < n) out[i] = 3.0f * s[blockDim.x - 1 - threadIdx.x];
        }
        __global__ void shift(int* out, const int* a, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            __syncthreads();
            if (i < n) out[i] = a[i] + 1000 * (int)blockIdx.x;
        }''')
        scale, shift = mod.get_function("scale"), mod.get_function("shift")
        errors = []

        def worker(k):
            rng = np.random.default_rng(k)
            try:
                for rep in range(40):
                    n = 128 * int(rng.integers(1, 6))
                    if k % 2:
                        a = rng.standard_normal(n).astype(np.float32)
                        out = np.full(n, np.nan, np.float32)
                        scale(drv.Out(out), drv.In(a), np.int32(n), block=(128, 1, 1), grid=(n // 128, 1))
                        want = 3 * a.reshape(-1, 128)[:, ::-1].ravel()
                    else:
                        a = rng.integers(0, 100, n).astype(np.int32)
                        out = np.full(n, -1, np.int32)
                        shift(drv.Out(out), drv.In(a), np.int32(n), block=(64, 1, 1), grid=(n // 64, 1))
                        want = a + 1000 * (np.arange(n) // 64)
                    if not np.array_equal(out, want):
                        errors.append(f"thread {k} repetition {rep}: wrong result")
            except Exception as e:
                errors.append(f"thread {k}: {e}")

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert not errors, errors
        print("ok")
    """, timeout=300)
    assert out.strip().endswith("ok")


def test_source_module_from_a_thread_that_outlives_the_main_script():
    out = run_program("""
        import threading
        import numpy as np
        import pycuda.autoinit

        def late():
            import time
            time.sleep(0.5)         # the main script has returned by now
            import pycuda.driver as drv
            from pycuda.compiler import SourceModule
            mod = SourceModule('''
            __global__ void late_kernel(int* out) { out[threadIdx.x] = 5 * threadIdx.x + 11; }''')
            out = np.full(40, -1, np.int32)
            mod.get_function("late_kernel")(drv.Out(out), block=(40, 1, 1))
            assert np.array_equal(out, 5 * np.arange(40) + 11)
            print("ok", flush=True)

        threading.Thread(target=late).start()
    """)
    assert out.strip().endswith("ok")


@pytest.mark.parametrize("order", ["F", "C"])
def test_fortran_ordered_array_keeps_its_layout(order):
    out = run_program(f"""
        import numpy as np
        import pycuda.autoinit
        import pycuda.driver as drv
        import pycuda.gpuarray as gpuarray
        from pycuda.compiler import SourceModule
        mod = SourceModule('''
        __global__ void copy_flat(float* out, const float* a, int n) {{
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) out[i] = a[i];
        }}''')
        host = np.asarray(np.random.default_rng(3).standard_normal((5, 7)).astype(np.float32), order="{order}")
        a_gpu = gpuarray.to_gpu(host)
        assert a_gpu.flags.f_contiguous == host.flags.f_contiguous, a_gpu.strides
        assert a_gpu.strides == host.strides, (a_gpu.strides, host.strides)
        flat = np.full(35, np.nan, np.float32)
        mod.get_function("copy_flat")(drv.Out(flat), a_gpu, np.int32(35), block=(64, 1, 1))
        # the kernel sees the bytes in the array's own order, as on a GPU
        assert np.array_equal(flat, host.ravel(order="{order}")), flat
        back = a_gpu.get()
        assert back.strides == host.strides and np.array_equal(back, host)
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_a_store_into_a_buffer_beside_the_shared_arrays_is_global():
    """A 64 MiB C with 4 MiB A and B: the host maps such buffers beside the emulator's shared arrays."""
    out = run_program("""
        import grader
        from grader.kernels import sgemm, stages
        from grader.kernels.stages import Launch
        grader.use_backend("emulator")
        stage = stages.stage("blocktile-2d")
        function = sgemm.compile_kernel(stage)
        drv = sgemm.driver_of(function)
        M = N = 4096
        K = 256
        a, b, c = drv.mem_alloc(M * K * 4), drv.mem_alloc(K * N * 4), drv.mem_alloc(M * N * 4)
        with emulator.analyze() as report:
            sgemm.launch_kernel(function, Launch((1, 1, 1), (256, 1, 1), 0), M, N, K, a, b, c)
        print("findings", len(report.out_of_bounds))
    """, timeout=300)
    assert "findings 0" in out, out


def test_a_changed_emulator_header_rebuilds_the_kernels(tmp_path, monkeypatch):
    """A kernel's cached build stood for the emulator's CUDA headers as they were when it was built: one
    built before a header changed was loaded after it."""
    import shutil

    from grader.emulator import build
    source = '#include <cuda_pipeline.h>\n__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n'
    before = build.build_module(source, no_extern_c=True).library.name
    headers = tmp_path / "include"
    shutil.copytree(build.STUB_INCLUDE_DIR, headers)
    (headers / "cuda_pipeline.h").write_text((headers / "cuda_pipeline.h").read_text() + "// changed\n")
    monkeypatch.setattr(build, "STUB_INCLUDE_DIR", headers)
    assert build.build_module(source, no_extern_c=True).library.name != before
