"""PyCUDA behaviour the emulator must match: comparisons of
GPUArrays, device attributes by name, memory limits from the host, launch
arguments PyCUDA refuses, and what needs a context. Each program runs in a
fresh process under `python -m grader.emulator`, as a student's script would."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ON_EMULATOR

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not ON_EMULATOR, reason="runs programs on the emulator")


def run_script(tmp_path, body: str) -> str:
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(body))
    p = subprocess.run([sys.executable, "-m", "grader.emulator", str(script)], capture_output=True, text=True,
                       cwd=REPO, timeout=300)
    assert p.returncode == 0, f"exit status {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def test_gpuarray_comparisons_and_arithmetic_are_elementwise(tmp_path):
    out = run_script(tmp_path, """
        import numpy as np
        import pycuda.autoinit
        import pycuda.gpuarray as gpuarray
        rng = np.random.default_rng(7)
        a = rng.integers(0, 5, 37).astype(np.float32)
        b = rng.integers(0, 5, 37).astype(np.float32)
        a_gpu, b_gpu = gpuarray.to_gpu(a), gpuarray.to_gpu(b)
        eq = (a_gpu == b_gpu).get()
        assert eq.dtype == np.float32 and np.array_equal(eq, (a == b).astype(np.float32)), eq
        assert np.array_equal((a_gpu < 2).get(), (a < 2).astype(np.float32))
        assert np.array_equal((2 * a_gpu + b_gpu / 2).get(), 2 * a + b / 2)
        assert (a_gpu * 2.0).dtype == np.float32          # a Python float stays weak, as in PyCUDA
        assert float(gpuarray.sum(a_gpu).get()) == a.sum() and gpuarray.sum(a_gpu).shape == ()
        assert float(gpuarray.dot(a_gpu, b_gpu).get()) == np.dot(a, b)
        assert float(gpuarray.max(a_gpu).get()) == a.max() and float(gpuarray.min(b_gpu).get()) == b.min()
        assert np.array_equal(a_gpu[3:30:4].get(), a[3:30:4])
        assert np.array_equal(a_gpu.astype(np.int32).get(), a.astype(np.int32))
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_elementwise_and_reduction_kernels_compile_user_code(tmp_path):
    out = run_script(tmp_path, """
        import numpy as np
        import pycuda.autoinit
        import pycuda.gpuarray as gpuarray
        from pycuda.elementwise import ElementwiseKernel
        from pycuda.reduction import ReductionKernel
        rng = np.random.default_rng(8)
        x, y = rng.standard_normal(1001).astype(np.float32), rng.standard_normal(1001).astype(np.float32)
        x_gpu, y_gpu = gpuarray.to_gpu(x), gpuarray.to_gpu(y)
        z_gpu = gpuarray.to_gpu(np.full(1001, np.nan, np.float32))
        lin = ElementwiseKernel("float a, float *x, float *y, float *z", "z[i] = a * x[i] + y[i]", "lin")
        lin(np.float32(3), x_gpu, y_gpu, z_gpu)
        assert np.allclose(z_gpu.get(), 3 * x + y, rtol=1e-6, atol=1e-6)
        dot = ReductionKernel(np.float32, neutral="0", reduce_expr="a+b", map_expr="x[i]*y[i]",
                              arguments="float *x, float *y")
        assert np.isclose(dot(x_gpu, y_gpu).get(), np.dot(x, y), rtol=1e-4)
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_device_attributes_are_keyed_by_name(tmp_path):
    out = run_script(tmp_path, """
        import pycuda.autoinit
        import pycuda.driver as drv
        attrs = drv.Device(0).get_attributes()
        named = {str(k): v for k, v in attrs.items()}
        assert named["MAX_THREADS_PER_BLOCK"] == 1024 and named["WARP_SIZE"] == 32, sorted(named)[:5]
        assert attrs[drv.device_attribute.MULTIPROCESSOR_COUNT] == 132
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_memory_is_the_hosts(tmp_path):
    out = run_script(tmp_path, """
        import pycuda.autoinit
        import pycuda.driver as drv
        free, total = drv.mem_get_info()
        host_total = int(open("/proc/meminfo").readline().split()[1]) * 1024
        assert 0 < free <= total <= min(host_total, 141 * 10**9), (free, total, host_total)
        assert drv.Device(0).total_memory() == total
        try:
            drv.mem_alloc(total + 2**30)
        except drv.MemoryError as e:
            assert "out of memory" in str(e)
        else:
            raise AssertionError("an allocation larger than the device succeeded")
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_float_grid_dimensions_are_refused(tmp_path):
    out = run_script(tmp_path, """
        import numpy as np
        import pycuda.autoinit
        import pycuda.driver as drv
        from pycuda.compiler import SourceModule
        f = SourceModule("__global__ void k(int* x) { x[threadIdx.x] = 1; }").get_function("k")
        x = drv.mem_alloc(256)
        for grid, block in (((2.0, 1), (32, 1, 1)), ((1, 1), (32.0, 1, 1))):
            try:
                f(x, grid=grid, block=block)
            except TypeError as e:
                assert "float" in str(e)
            else:
                raise AssertionError(f"grid={grid} block={block} was accepted")
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_no_context_no_launch(tmp_path):
    # What PyCUDA 2026.1 says on an H200 (results/emulator-compat.md): before
    # init(), "initialization error"; after it, without a context, "invalid device context".
    out = run_script(tmp_path, """
        import pycuda.driver as drv
        from pycuda.compiler import SourceModule

        def refused(call, expected):
            try:
                call()
            except drv.LogicError as e:
                assert expected in str(e), e
            else:
                raise AssertionError(f"{call} succeeded, expected {expected!r}")

        refused(lambda: drv.mem_alloc(64), "cuMemAlloc failed: initialization error")
        refused(lambda: SourceModule("__global__ void k() {}"), "cuModuleLoadDataEx failed: initialization error")
        drv.init()
        refused(lambda: drv.mem_alloc(64), "invalid device context - no currently active context?")
        refused(lambda: drv.mem_get_info(), "invalid device context")
        ctx = drv.Device(0).make_context()
        drv.mem_alloc(64)
        ctx.pop()
        refused(lambda: drv.mem_alloc(64), "invalid device context")
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_complex_elementwise_kernel_with_pycudas_header(tmp_path):
    out = run_script(tmp_path, """
        import numpy as np
        import pycuda.autoinit
        import pycuda.gpuarray as gpuarray
        from pycuda.elementwise import ElementwiseKernel
        rng = np.random.default_rng(9)
        a = (rng.standard_normal(301) + 1j * rng.standard_normal(301)).astype(np.complex64)
        b = (rng.standard_normal(301) + 1j * rng.standard_normal(301)).astype(np.complex64)
        mul = ElementwiseKernel("pycuda::complex<float> *x, pycuda::complex<float> *y, pycuda::complex<float> *z",
                                "z[i] = x[i] * conj(y[i])", "complex_mul", preamble="#include <pycuda-complex.hpp>")
        c_gpu = gpuarray.to_gpu(np.full(301, np.nan, np.complex64))
        mul(gpuarray.to_gpu(a), gpuarray.to_gpu(b), c_gpu)
        assert np.allclose(c_gpu.get(), a * np.conj(b), rtol=1e-5, atol=1e-5)
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_linear_combination_kernel_fails_to_compile_as_on_cuda_13_and_elwise_module_runs(tmp_path):
    """pycuda.elementwise.get_linear_combination_kernel includes pycuda-helpers.hpp
    (textures, surfaces), which CUDA 13 cannot compile (PyCUDA 2026.1 on the
    H200): a CompileError here too, with or without scalars on the device.
    get_elwise_module, which the same example uses without textures, runs."""
    out = run_script(tmp_path, """
        import numpy as np
        import pycuda.autoinit
        import pycuda.driver as drv
        import pycuda.gpuarray as gpuarray
        from pycuda.elementwise import get_elwise_module, get_linear_combination_kernel, ScalarArg, VectorArg
        for on_device in (False, True):
            try:
                get_linear_combination_kernel(((on_device, np.float32, np.float32),
                                               (False, np.float32, np.float32)), np.float32)
            except drv.CompileError as e:
                print("CompileError", "pycuda-helpers.hpp" in str(e))
        n = 1000 + 37
        x = np.random.default_rng(3).random(n).astype(np.float32)
        x_gpu = gpuarray.to_gpu(x)
        mod = get_elwise_module([VectorArg(np.float32, "a"), VectorArg(np.float32, "x"), ScalarArg(np.uintp, "n")],
                                "x[i] = a0 * x[i]", "scale", loop_prep="float a0 = *a")
        five = gpuarray.to_gpu(np.array([5], np.float32))
        mod.get_function("scale")(five, x_gpu, np.uintp(n), block=(128, 1, 1), grid=(3, 1))
        assert np.allclose(x_gpu.get(), 5 * x)
        print("ok")
        """)
    assert out.split() == ["CompileError", "True", "CompileError", "True", "ok"]
