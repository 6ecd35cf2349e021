"""Emulated `pycuda.curandom`: the interfaces of rand() and of the XORWOW,
MRG32k3a and Sobol generators, drawing from numpy's generator. The numbers
have the distributions cuRAND's have (uniform in (0, 1], normal, log-normal,
Poisson) but are NOT the same bits as cuRAND's: a program that compares
with numbers recorded on a GPU will differ; one that tests statistics will not."""
from __future__ import annotations

import numpy as np

from . import driver as drv
from .gpuarray import GPUArray

_rng = np.random.default_rng()


def get_curand_version() -> tuple[int, int, int]:
    return (10, 3, 10)


def rand(shape, dtype=np.float32, stream=None) -> GPUArray:
    """Uniform in [0, 1), like PyCUDA's md5-based rand."""
    dtype = np.dtype(dtype)
    result = GPUArray(shape, dtype)
    if dtype in (np.float32, np.float64) and result.size:
        with drv._serial:           # straight into device memory: no host array, no copy
            _rng.random(out=result._view(), dtype=dtype)
    elif dtype.kind == "f":
        result.set(_rng.random(result.shape, dtype=dtype))
    elif dtype in (np.int32, np.uint32):
        result.set(_rng.integers(0, 2**32, result.shape, dtype=np.uint32).view(dtype))
    elif dtype.kind == "c":
        real = np.empty(0, dtype).real.dtype
        result.set((_rng.random(result.shape, dtype=real) + 1j * _rng.random(result.shape, dtype=real)).astype(dtype))
    else:
        raise NotImplementedError(f"rand of {dtype}")
    return result


def seed_getter_uniform(n):
    value = int(_rng.integers(0, 2**31))
    return np.full(n, value, np.int32)


def seed_getter_unique(n):
    return _rng.integers(0, 2**31, n).astype(np.int32)


class _Generator:
    """The methods PyCUDA's cuRAND generators share."""

    def __init__(self, seed_getter=None, offset=0, *args, **kwargs):
        seed = seed_getter(1)[0] if seed_getter else None
        self._rng = np.random.default_rng(None if seed is None else int(seed) + int(offset))

    generators_per_block = 256
    block_count = 32

    @staticmethod
    def _check(data: GPUArray, kinds: str) -> None:
        if data.dtype.kind not in kinds or data.dtype.itemsize not in (4, 8, 16):
            raise NotImplementedError(f"unsupported dtype {data.dtype} for this distribution")

    def _fill(self, data: GPUArray, values) -> GPUArray:
        data.set(np.asarray(values).astype(data.dtype, copy=False).reshape(data.shape))
        return data

    def _complex_or(self, draw, data):
        if data.dtype.kind == "c":
            return draw(data.shape) + 1j * draw(data.shape)
        return draw(data.shape)

    def fill_uniform(self, data: GPUArray, stream=None) -> GPUArray:
        if data.dtype == np.uint32:     # curandGenerate: raw 32-bit words
            return self._fill(data, self._rng.integers(0, 2**32, data.shape, dtype=np.uint32))
        self._check(data, "fc")
        return self._fill(data, self._complex_or(lambda s: 1.0 - self._rng.random(s), data))   # (0, 1], as cuRAND

    def fill_normal(self, data: GPUArray, stream=None) -> GPUArray:
        self._check(data, "fc")
        return self._fill(data, self._complex_or(self._rng.standard_normal, data))

    def fill_log_normal(self, data: GPUArray, mean, stddev, stream=None) -> GPUArray:
        self._check(data, "f")
        return self._fill(data, self._rng.lognormal(mean, stddev, data.shape))

    def fill_poisson(self, data: GPUArray, lambda_value=None, stream=None) -> GPUArray:
        """Poisson numbers of mean lambda_value, or of each element's value where it is None."""
        lam = data.get() if lambda_value is None else lambda_value
        return self._fill(data, self._rng.poisson(lam, data.shape))

    def gen_uniform(self, shape, dtype, stream=None) -> GPUArray:
        return self.fill_uniform(GPUArray(shape, dtype))

    def gen_normal(self, shape, dtype, stream=None) -> GPUArray:
        return self.fill_normal(GPUArray(shape, dtype))

    def gen_log_normal(self, shape, dtype, mean, stddev, stream=None) -> GPUArray:
        return self.fill_log_normal(GPUArray(shape, dtype), mean, stddev)

    def gen_poisson(self, shape, dtype, lambda_value, stream=None) -> GPUArray:
        return self.fill_poisson(GPUArray(shape, dtype), lambda_value)

    def call_skip_ahead(self, i, stream=None) -> None:
        pass

    call_skip_ahead_array = call_skip_ahead_sequence = call_skip_ahead_sequence_array = call_skip_ahead
    call_skip_ahead_subsequence = call_skip_ahead_subsequence_array = call_skip_ahead


class XORWOWRandomNumberGenerator(_Generator):
    pass


class MRG32k3aRandomNumberGenerator(_Generator):
    pass


class Sobol32RandomNumberGenerator(_Generator):
    def __init__(self, dir_vector=None, offset=0):
        super().__init__(None, offset)


ScrambledSobol32RandomNumberGenerator = Sobol64RandomNumberGenerator = Sobol32RandomNumberGenerator
ScrambledSobol64RandomNumberGenerator = Sobol32RandomNumberGenerator
