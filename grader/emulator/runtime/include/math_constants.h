// The few constants of CUDA's math_constants.h that kernels use most.
#pragma once
#define CUDART_PI_F 3.141592654f
#define CUDART_PI 3.1415926535897931e+0
#define CUDART_INF __builtin_huge_val()
#define CUDART_NAN __builtin_nan("")
#define CUDART_MAX_NORMAL_F 3.40282347e+38f
