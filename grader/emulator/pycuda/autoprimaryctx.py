"""Emulated `pycuda.autoprimaryctx`: the primary context of the one device."""
from . import driver as cuda

cuda.init()
device = cuda.Device(0)
context = device.retain_primary_context()
context.push()
