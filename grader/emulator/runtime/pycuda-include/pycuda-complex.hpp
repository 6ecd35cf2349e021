// PyCUDA's complex type (pycuda::complex<T>), given to nvcc and the host
// compiler as PyCUDA gives its own: the layout (real, imaginary) of numpy's
// complex64/complex128. On the CPU it is std::complex; for nvcc's check,
// libcu++'s cuda::std::complex, which device code can use.
#pragma once
extern "C++" {
#if defined(__EMU_CPU__)
#include <complex>
#define EMU_COMPLEX_NS std
#else
#include <cuda/std/complex>
#define EMU_COMPLEX_NS cuda::std
#endif
namespace pycuda {
template <class T> using complex = EMU_COMPLEX_NS::complex<T>;
using EMU_COMPLEX_NS::abs; using EMU_COMPLEX_NS::arg; using EMU_COMPLEX_NS::conj; using EMU_COMPLEX_NS::imag;
using EMU_COMPLEX_NS::norm; using EMU_COMPLEX_NS::polar; using EMU_COMPLEX_NS::real;
using EMU_COMPLEX_NS::exp; using EMU_COMPLEX_NS::log; using EMU_COMPLEX_NS::pow; using EMU_COMPLEX_NS::sqrt;
using EMU_COMPLEX_NS::sin; using EMU_COMPLEX_NS::cos; using EMU_COMPLEX_NS::sinh; using EMU_COMPLEX_NS::cosh;
}
#undef EMU_COMPLEX_NS
}
