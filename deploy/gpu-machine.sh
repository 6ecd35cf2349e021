#!/usr/bin/env bash
# Install PyCUDA for this course on a machine with an NVIDIA GPU and the CUDA
# toolkit, into the Python that runs the course (python3, or $PYTHON).
#
#   bash deploy/gpu-machine.sh              # build PyCUDA from its PyPI source distribution
#   bash deploy/gpu-machine.sh WHEEL_DIR    # or install it from a folder of wheels (no network needed)
#
# Does nothing when PyCUDA already imports, so it can precede every command:
#   bash deploy/gpu-machine.sh && GRADER_BACKEND=gpu python3 -m grader bench
# The build runs PyCUDA's configure.py against the toolkit in $CUDA_ROOT
# (default /usr/local/cuda) and the driver's libcuda.so (its folder from
# ldconfig, else the toolkit's stub; or $CUDA_DRIVER_LIB_DIR), without cuRAND:
# the course does not use it (pycuda.curandom then fails, the rest works).
# CuPy, whose cuBLAS is the baseline of every GFLOPS figure, is not installed
# here: `python3 -m pip install cupy-cuda12x` (or cupy-cuda13x) to match the toolkit.
set -euo pipefail
python=${PYTHON:-python3}

if "$python" -c "import pycuda.driver" 2>/dev/null; then
    echo "PyCUDA $("$python" -c 'import pycuda; print(pycuda.VERSION_TEXT)') is already installed"
    exit 0
fi

driver_lib_dir() {
    local lib
    lib=$(/sbin/ldconfig -p | awk '$1 == "libcuda.so" { print $NF; exit }')
    if [ -n "$lib" ]; then
        dirname "$lib"
    elif [ -e "$cuda_root/lib64/stubs/libcuda.so" ]; then
        echo "$cuda_root/lib64/stubs"       # link against the stub; the driver's libcuda.so.1 loads at run time
    else
        echo "no libcuda.so (ldconfig -p) and no $cuda_root/lib64/stubs/libcuda.so: set CUDA_DRIVER_LIB_DIR" >&2
        return 1
    fi
}

if [ $# -ge 1 ]; then
    "$python" -m pip install --no-index --find-links "$1" pycuda numpy
else
    cuda_root=${CUDA_ROOT:-/usr/local/cuda}
    [ -x "$cuda_root/bin/nvcc" ] || { echo "no CUDA toolkit at $cuda_root (set CUDA_ROOT)" >&2; exit 1; }
    lib_dir=${CUDA_DRIVER_LIB_DIR:-$(driver_lib_dir)}
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$python" -m pip download --no-deps --no-binary pycuda pycuda -d "$work"
    tar xzf "$work"/pycuda-*.tar.gz -C "$work"
    (
        cd "$work"/pycuda-*/
        "$python" configure.py --cuda-root="$cuda_root" --no-cuda-enable-curand --cudadrv-lib-dir="$lib_dir"
        "$python" -m pip install . numpy       # PyCUDA imports numpy without requiring it
    )
fi
"$python" -c "import pycuda.autoinit, pycuda.driver as d, pycuda
print('PyCUDA', pycuda.VERSION_TEXT, 'on', d.Context.get_device().name())"
