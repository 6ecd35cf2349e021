"""PyCUDA's API, emulated on the CPU (installed as `pycuda` by grader.emulator.install)."""
VERSION = (2026, 1)
VERSION_STATUS = "emulated"
VERSION_TEXT = "2026.1 (CPU emulator)"
