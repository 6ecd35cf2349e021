"""Emulated `pycuda.tools`: only what the labs use. PyCUDA's OccupancyRecord
and DeviceData hard-code old GPU limits, so the course has its own occupancy
calculator (grader.occupancy) instead."""
from . import driver as cuda


def make_default_context():
    return cuda.Device(0).make_context()


def clear_context_caches():
    pass
