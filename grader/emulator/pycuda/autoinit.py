"""Emulated `pycuda.autoinit`: one device, one context."""
import atexit

from . import driver as cuda

cuda.init()
device = cuda.Device(0)
context = device.make_context()
atexit.register(context.pop)
