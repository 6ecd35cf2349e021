// Stub: the pipeline primitives; the C++ cuda::pipeline API is not emulated.
#pragma once
#include "cuda_pipeline_primitives.h"
