// Stub: the emulator prelude (cuda_emu.h) already declares the CUDA device API.
#pragma once
