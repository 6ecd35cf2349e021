"""The course's Hopper header (grader/emulator/runtime/include/hopper.cuh on the emulator,
pycuda-include/hopper.cuh for nvcc): mbarriers with phases and bulk asynchronous copies. A ring of
two stages streams tiles through shared memory; read before its wait, a tile is not there yet; a
wait no arrival can end is a deadlock named by its line; a copy past the end of its buffer is named by
its line; a stage refilled before its readers released it, or read before its wait, is a race named by
the copy's line and the read's, and so are a bulk store's mistakes (no proxy fence, its source written
before its wait); a tensor copy loads a box of a matrix, zeros outside it, its chunks permuted when
swizzled; a graded source may include the header, and nvcc accepts it for sm_90."""
import shutil
import subprocess

import numpy as np
import pytest
from conftest import ON_EMULATOR

from grader.emulator import build
from grader.emulator.build import PYCUDA_INCLUDE_DIR

TILE = 256          # floats in a tile: one per thread, 1 KiB a copy

RING = """#include "hopper.cuh"
#define TILE 256
__global__ void stream(const float* in, float* out, int tiles)
{
    __shared__ float4 stage[2][TILE / 4];
    __shared__ uint64_t full[2];
    const int t = threadIdx.x;
    if (t == 0) {
        mbarrier_init(&full[0], blockDim.x + EXTRA_ARRIVALS);
        mbarrier_init(&full[1], blockDim.x + EXTRA_ARRIVALS);
        fence_mbarrier_init();
    }
    __syncthreads();
    for (int i = 0; i < tiles; ++i) {
        const int s = i % 2;
        const float* tile = reinterpret_cast<const float*>(stage[s]);
        if (t == 0) {
            mbarrier_arrive_expect_tx(&full[s], TILE * 4);
            bulk_copy_g2s(stage[s], in + i * TILE, TILE * 4, &full[s]);
        } else {
            mbarrier_arrive(&full[s]);
        }
        READ_EARLY
        mbarrier_wait_parity(&full[s], (i / 2) % 2);
        READ_LATE
        out[i * TILE + t] = 2.0f * v;
        __syncthreads();        // every thread has read the stage before it is filled again
    }
}
"""
LATE = {"EXTRA_ARRIVALS": "0", "READ_EARLY": "", "READ_LATE": "const float v = tile[t];"}


def _ring_source(**changes) -> str:
    source = RING
    for name, text in {**LATE, **changes}.items():
        source = source.replace(name, text)
    return source


def _ring(source_module, **changes):
    return source_module(_ring_source(**changes), include_dirs=[str(PYCUDA_INCLUDE_DIR)]).get_function("stream")


def _stream(cuda, kernel, tiles: int):
    a = np.random.default_rng(5).random(tiles * TILE, dtype=np.float32)
    out = np.full_like(a, np.nan)
    kernel(cuda.In(a), cuda.Out(out), np.int32(tiles), block=(TILE, 1, 1), grid=(1, 1))
    return a, out


def test_a_ring_of_two_stages_streams_every_tile(cuda, source_module):
    a, out = _stream(cuda, _ring(source_module), tiles=5)
    assert np.array_equal(out, 2 * a)


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU the copy may read what lies past the end, unreported")
def test_a_bulk_copy_past_the_end_of_its_buffer_is_named_by_its_line(cuda, source_module):
    a = np.random.default_rng(5).random(4 * TILE, dtype=np.float32)
    out = np.full(5 * TILE, np.nan, np.float32)
    with pytest.raises(cuda.LaunchError) as e:          # five tiles streamed from an input of four
        _ring(source_module)(cuda.In(a), cuda.Out(out), np.int32(5), block=(TILE, 1, 1), grid=(1, 1))
    line = _ring_source().splitlines().index(next(x for x in _ring_source().splitlines() if "bulk_copy_g2s" in x)) + 1
    assert f"the bulk copy on line {line} reads 1024 bytes" in str(e.value), str(e.value)
    assert "past the end of the allocation" in str(e.value) or "in no device allocation" in str(e.value)


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU the copy may land first, and shared memory is not poisoned")
def test_a_tile_read_before_its_wait_is_not_there_yet(cuda, source_module):
    early = _ring(source_module, READ_EARLY="const float v = tile[t];", READ_LATE="")
    a, out = _stream(cuda, early, tiles=3)
    wrong = out != 2 * a
    assert wrong.reshape(3, TILE).mean(axis=1).min() > 0.5, wrong.reshape(3, TILE).mean(axis=1)


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU the wait never ends")
def test_a_wait_no_arrival_can_end_is_a_deadlock_with_its_line(cuda, source_module):
    kernel = _ring(source_module, EXTRA_ARRIVALS="1")       # one arrival more than the block makes
    line = RING.splitlines().index("        mbarrier_wait_parity(&full[s], (i / 2) % 2);") + 1
    with pytest.raises(cuda.LaunchError) as err:
        _stream(cuda, kernel, tiles=2)
    message = str(err.value)
    assert err.value.kind == "deadlock", message
    assert f"256 thread(s) wait on an mbarrier on line {line} for its phase of parity 0" in message, message
    assert "1 of its 257 arrival(s)" in message, message


# Warp specialization: thread TILE (warp 8) fills the stages, the first 8 warps read them and release
# each stage on its `empty` mbarrier, which the producer waits on before refilling it.
SPECIALIZED = """#include "hopper.cuh"
#define TILE 256
#define STAGES 2
__global__ void stream(const float* in, float* out, int tiles)
{
    __shared__ float4 stage[STAGES][TILE / 4];
    __shared__ uint64_t full[STAGES], empty[STAGES];
    const int t = threadIdx.x;
    if (t == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&full[s], 1);
            mbarrier_init(&empty[s], TILE);
        }
        fence_mbarrier_init();
    }
    __syncthreads();
    if (t == TILE) {
        for (int i = 0; i < tiles; ++i) {
            const int s = i % STAGES;
            if (i >= STAGES) mbarrier_wait_parity(&empty[s], (i / STAGES - 1) % 2);
            mbarrier_arrive_expect_tx(&full[s], TILE * 4);
            bulk_copy_g2s(stage[s], in + i * TILE, TILE * 4, &full[s]);
        }
    } else if (t < TILE) {
        for (int i = 0; i < tiles; ++i) {
            const int s = i % STAGES;
            mbarrier_wait_parity(&full[s], (i / STAGES) % 2);
            const float v = reinterpret_cast<const float*>(stage[s])[t];
            mbarrier_arrive(&empty[s]);
            out[i * TILE + t] = 2.0f * v;
        }
    }
}
"""
NO_EMPTY_WAIT = ("            if (i >= STAGES) mbarrier_wait_parity(&empty[s], (i / STAGES - 1) % 2);\n", "")


def _line(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def _races(cuda, source_module, source: str, threads: int, tiles: int = 5):
    from grader.emulator import analyze
    kernel = source_module(source, include_dirs=[str(PYCUDA_INCLUDE_DIR)]).get_function("stream")
    a = np.random.default_rng(5).random(tiles * TILE, dtype=np.float32)
    out = np.full_like(a, np.nan)
    with analyze() as report:
        kernel(cuda.In(a), cuda.Out(out), np.int32(tiles), block=(threads, 1, 1), grid=(1, 1))
    return report.races, np.array_equal(out, 2 * a)


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_a_producer_warp_that_waits_for_its_consumers_has_no_race(cuda, source_module):
    races, right = _races(cuda, source_module, SPECIALIZED, TILE + 32)
    assert right and races == [], [r.describe() for r in races]
    races, right = _races(cuda, source_module, _ring_source(), TILE)
    assert right and races == [], [r.describe() for r in races]


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_a_stage_refilled_before_its_consumers_released_it_is_a_race_named_by_its_lines(cuda, source_module):
    source = SPECIALIZED.replace(*NO_EMPTY_WAIT)
    assert source != SPECIALIZED
    races, right = _races(cuda, source_module, source, TILE + 32, tiles=3)   # the third tile overruns the first
    copy, read = _line(source, "bulk_copy_g2s("), _line(source, "const float v =")
    assert not right and races and {(r.line_a, r.line_b) for r in races} <= {(read, copy), (copy, read)}, races
    text = races[0].describe()
    assert f"bulk copy on line {copy}" in text and f"line {read}" in text, text
    assert "(256, 0, 0)" in text, text                          # the producer thread


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_a_stage_released_before_it_is_read_is_a_race_even_when_the_schedule_hides_it(cuda, source_module):
    read, release = ("            const float v = reinterpret_cast<const float*>(stage[s])[t];\n",
                     "            mbarrier_arrive(&empty[s]);\n")
    source = SPECIALIZED.replace(read + release, release + read)
    assert source != SPECIALIZED
    races, right = _races(cuda, source_module, source, TILE + 32)
    assert right                                                # here every thread read before the refill
    assert {(r.kind, r.line_a, r.line_b) for r in races} == {
        ("bulk copy over an access", _line(source, "const float v ="), _line(source, "bulk_copy_g2s("))}, races
    assert "a stage refilled before its readers released it" in races[0].describe()


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_an_mbarrier_used_before_its_initialisation_is_ordered_is_a_race(cuda, source_module):
    source = SPECIALIZED.replace("    __syncthreads();\n    if (t == TILE) {", "    if (t == TILE) {", 1)
    assert source != SPECIALIZED
    races, _ = _races(cuda, source_module, source, TILE + 32)
    inits = {_line(source, "mbarrier_init(&full[s], 1);"), _line(source, "mbarrier_init(&empty[s], TILE);")}
    uses = {i for i, line in enumerate(source.splitlines(), 1)
            if any(call in line for call in ("mbarrier_wait_parity(", "mbarrier_arrive", "bulk_copy_g2s("))}
    late = [r for r in races if r.kind == "mbarrier used before its initialisation"]
    assert late and {r.line_a for r in late} <= inits and {r.line_b for r in late} <= uses, \
        [r.describe() for r in races]
    assert "fence_mbarrier_init() and a __syncthreads() after mbarrier_init()" in late[0].describe()


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_a_tile_read_before_its_wait_is_a_race_with_the_copy(cuda, source_module):
    source = _ring_source(READ_EARLY="const float v = tile[t];", READ_LATE="")
    races, right = _races(cuda, source_module, source, TILE, tiles=3)
    copy, read = _line(source, "bulk_copy_g2s("), _line(source, "const float v =")
    assert not right and races, races
    assert {(r.kind, r.line_a, r.line_b) for r in races} == {("access before its bulk copy's phase", copy, read)}
    assert "with no wait for the mbarrier phase" in races[0].describe()


# An epilogue through a bulk store: each thread writes its element to shared memory, fences it for the
# asynchronous proxy, the block syncs, thread 0 stores the tile and waits until it has been read.
EPILOGUE = """#include "hopper.cuh"
#define TILE 256
__global__ void stream(const float* in, float* out, int tiles)
{
    __shared__ float4 staged[TILE / 4];
    float* tile = reinterpret_cast<float*>(staged);
    const int t = threadIdx.x;
    for (int i = 0; i < tiles; ++i) {
        tile[t] = 2.0f * in[i * TILE + t];
        fence_proxy_async();
        __syncthreads();
        if (t == 0) {
            bulk_copy_s2g(out + i * TILE, tile, TILE * 4);
            bulk_commit_group();
            bulk_wait_group_read(0);
        }
        __syncthreads();
    }
}
"""


@pytest.mark.parametrize("source, threads", [(SPECIALIZED, TILE + 32), (EPILOGUE, TILE)],
                         ids=["specialized", "epilogue"])
def test_a_producer_warp_and_a_bulk_store_epilogue_stream_every_tile(cuda, source_module, source, threads):
    kernel = source_module(source, include_dirs=[str(PYCUDA_INCLUDE_DIR)]).get_function("stream")
    a = np.random.default_rng(5).random(7 * TILE, dtype=np.float32)
    out = np.full_like(a, np.nan)
    kernel(cuda.In(a), cuda.Out(out), np.int32(7), block=(threads, 1, 1), grid=(1, 1))
    assert np.array_equal(out, 2 * a)


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_an_epilogue_through_a_bulk_store_has_no_race(cuda, source_module):
    races, right = _races(cuda, source_module, EPILOGUE, TILE)
    assert right and races == [], [r.describe() for r in races]


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
@pytest.mark.parametrize("missing, kind, first, second, says", [
    ("        fence_proxy_async();\n", "store not fenced before a bulk copy", "tile[t] =", "bulk_copy_s2g(",
     "no fence_proxy_async() between them"),
    ("            bulk_wait_group_read(0);\n", "write to a bulk store's source before its wait", "bulk_copy_s2g(",
     "tile[t] =", "the store's wait (bulk_wait_group_read) and then a __syncthreads()"),
    # thread 0 runs first here: it stores the tile before the others write their elements
    ("        __syncthreads();\n        if (t == 0) {", "write to a bulk store's source before its wait",
     "bulk_copy_s2g(", "tile[t] =", "a write meant for that store needs a __syncthreads() between it and the store"),
])
def test_a_bulk_store_mistake_is_a_race_named_by_its_lines(cuda, source_module, missing, kind, first, second, says):
    source = EPILOGUE.replace(missing, "        if (t == 0) {" if missing.endswith("{") else "", 1)
    assert source != EPILOGUE
    races, _ = _races(cuda, source_module, source, TILE, tiles=3)
    assert {(r.kind, r.line_a, r.line_b) for r in races} == {(kind, _line(source, first), _line(source, second))}, \
        [r.describe() for r in races]
    assert says in races[0].describe()


@pytest.mark.skipif(not ON_EMULATOR, reason="the race analysis is the emulator's")
def test_a_bulk_store_of_elements_other_threads_wrote_unordered_is_a_race(cuda, source_module):
    from grader.emulator import set_thread_order_seed
    source = EPILOGUE.replace("        __syncthreads();\n        if (t == 0) {", "        if (t == 0) {", 1)
    set_thread_order_seed(3)               # threads that write before thread 0 stores, and threads after it
    try:
        races, right = _races(cuda, source_module, source, TILE, tiles=2)
    finally:
        set_thread_order_seed(0)
    kinds = {r.kind: r for r in races}
    assert not right
    assert set(kinds) == {"bulk store of an unordered write", "write to a bulk store's source before its wait"}
    store = kinds["bulk store of an unordered write"]
    assert (store.line_a, store.line_b) == (_line(source, "tile[t] ="), _line(source, "bulk_copy_s2g("))
    assert "a __syncthreads() missing between the stores and the copy?" in store.describe()


# Tensor copies: each block loads one box of a matrix whose sides are no multiple of the box's.
BOXES = """#include "hopper.cuh"
#define BOX_ROWS 8
#define BOX_COLS 16
__global__ void boxes(const __grid_constant__ TensorMap map, float* out)
{
    __shared__ __align__(128) float box[BOX_ROWS * BOX_COLS];
    __shared__ uint64_t full;
    const int t = threadIdx.x;
    if (t == 0) {
        mbarrier_init(&full, 1);
        fence_mbarrier_init();
    }
    __syncthreads();
    if (t == 0) {
        fence_proxy_tensormap(&map);
        mbarrier_arrive_expect_tx(&full, sizeof(box));
        tma_load_2d(box, &map, blockIdx.x * BOX_COLS, blockIdx.y * BOX_ROWS, &full);
    }
    mbarrier_wait_parity(&full, 0);
    out[(blockIdx.y * gridDim.x + blockIdx.x) * BOX_ROWS * BOX_COLS + t] = box[t];
}
"""


def test_a_tensor_copy_loads_a_box_and_zeros_outside_the_matrix(cuda, source_module):
    from grader.kernels.tensor_map import tensor_map_2d
    rows, cols, box = 20, 40, (8, 16)
    a = np.random.default_rng(7).random((rows, cols), dtype=np.float32)
    grid = (-(-cols // box[1]), -(-rows // box[0]))
    d_a = cuda.to_device(a)
    out = np.full(grid[0] * grid[1] * box[0] * box[1], np.nan, np.float32)
    kernel = source_module(BOXES, include_dirs=[str(PYCUDA_INCLUDE_DIR)]).get_function("boxes")
    kernel(tensor_map_2d(int(d_a), a.shape, box, a.dtype), cuda.Out(out), block=(box[0] * box[1], 1, 1), grid=grid)
    padded = np.zeros((grid[1] * box[0], grid[0] * box[1]), np.float32)
    padded[:rows, :cols] = a
    expected = padded.reshape(grid[1], box[0], grid[0], box[1]).transpose(0, 2, 1, 3).ravel()
    assert np.array_equal(out, expected)


SWIZZLED = """#include "hopper.cuh"
__global__ void swizzled(const __grid_constant__ TensorMap map, unsigned short* out)
{
    __shared__ __align__(1024) unsigned short box[16 * 64];
    __shared__ uint64_t full;
    const int t = threadIdx.x;
    if (t == 0) {
        mbarrier_init(&full, 1);
        fence_mbarrier_init();
    }
    __syncthreads();
    if (t == 0) {
        fence_proxy_tensormap(&map);
        mbarrier_arrive_expect_tx(&full, sizeof(box));
        tma_load_2d(box, &map, 0, 0, &full);
    }
    mbarrier_wait_parity(&full, 0);
    for (int i = t; i < 16 * 64; i += blockDim.x) out[i] = box[i];
}
"""


def test_a_swizzled_tensor_copy_permutes_the_16_byte_chunks_of_each_row(cuda, source_module):
    from grader.kernels.tensor_map import tensor_map_2d
    a = np.arange(16 * 64, dtype=np.uint16).reshape(16, 64)
    d_a = cuda.to_device(a)
    out = np.zeros(16 * 64, np.uint16)
    kernel = source_module(SWIZZLED, include_dirs=[str(PYCUDA_INCLUDE_DIR)]).get_function("swizzled")
    kernel(tensor_map_2d(int(d_a), a.shape, (16, 64), np.uint16, swizzle=128), cuda.Out(out),
           block=(128, 1, 1), grid=(1, 1))
    chunks = out.reshape(16, 8, 8)                  # row, 16-byte chunk, element
    for r in range(16):
        for c in range(8):
            assert np.array_equal(chunks[r, c ^ (r % 8)], a[r, 8 * c:8 * c + 8]), (r, c)


@pytest.mark.parametrize("shape, box, dtype, says", [
    ((20, 41), (8, 16), np.float32, "rows are 164 bytes apart, not a multiple of 16"),
    ((20, 40), (8, 6), np.float32, "a box row of 6 elements is 24 bytes"),
    ((20, 40), (300, 16), np.float32, "each side must be 1 to 256 elements"),
    ((20, 40), (8, 16), np.complex64, "a tensor map of complex64 elements"),
    ((20, 64), (8, 32), np.uint16, "swizzle=128: 0, or 128 with box rows of 128 bytes (64 elements of uint16)"),
])
def test_a_tensor_map_the_driver_would_refuse_says_why(shape, box, dtype, says):
    from grader.kernels.tensor_map import TensorMapError, tensor_map_2d
    with pytest.raises(TensorMapError) as e:
        tensor_map_2d(1 << 20, shape, box, dtype, swizzle=128 if "swizzle" in says else 0)
    assert says in str(e.value), str(e.value)


def test_on_a_gpu_the_kernel_gets_the_address_of_the_drivers_map_kept_in_device_memory(monkeypatch):
    import sys
    import types

    from grader.kernels import tensor_map
    freed, copies = [], []

    class Copy:
        def __init__(self, data):
            self.data, self.address = bytes(data), 4096 * (len(copies) + 1)
            copies.append(self)

        def __int__(self):
            return self.address

        def free(self):
            freed.append(self.address)

    driver = types.SimpleNamespace(to_device=Copy, Error=RuntimeError)
    context = [1]
    monkeypatch.setitem(sys.modules, "pycuda", types.SimpleNamespace(driver=driver))
    monkeypatch.setitem(sys.modules, "pycuda.driver", driver)
    monkeypatch.setattr(tensor_map, "_current_context", lambda: context[0])
    monkeypatch.setattr(tensor_map, "_on_device", type(tensor_map._on_device)())
    monkeypatch.setattr(tensor_map, "KEPT_ON_DEVICE", 2)
    handles = [tensor_map._kept_on_device(bytes([i]) * 128) for i in (1, 2, 1, 3)]
    assert handles == [4096, 8192, 4096, 12288] and [c.data[0] for c in copies] == [1, 2, 3]
    assert freed == [8192]                  # the least recently used map, not the one used again
    context[0] = 2                          # a new context: the same map copied again, into it
    assert tensor_map._kept_on_device(bytes([3]) * 128) == 16384 and freed == [8192, 4096]


@pytest.mark.skipif(not ON_EMULATOR, reason="on a GPU the wait never ends")
def test_a_copy_larger_than_announced_is_a_deadlock_that_says_so(cuda, source_module):
    kernel = _ring(source_module, **{"TILE * 4);": "TILE * 2);"})      # half the tile's bytes announced
    with pytest.raises(cuda.LaunchError) as err:
        _stream(cuda, kernel, tiles=2)
    assert err.value.kind == "deadlock", str(err.value)
    assert ("its copies brought 512 byte(s) more than mbarrier_arrive_expect_tx() announced: announce the bytes "
            "of every copy landing on it)") in str(err.value)


def test_a_graded_source_may_include_the_header():
    assert build.refusals(_ring_source()) == []
    assert build.refusals(_ring_source() + '#include <fstream>\n')        # what it may not include, still not


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("source", [_ring_source(), SPECIALIZED, EPILOGUE, BOXES, SWIZZLED],
                         ids=["ring", "specialized", "epilogue", "tensor-copy", "swizzled"])
def test_nvcc_accepts_the_gpu_header(tmp_path, source):
    (tmp_path / "kernel.cu").write_text(source)
    p = subprocess.run(["nvcc", "--cubin", "-arch=sm_90", f"-I{PYCUDA_INCLUDE_DIR}", "-o", str(tmp_path / "k.cubin"),
                        str(tmp_path / "kernel.cu")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
