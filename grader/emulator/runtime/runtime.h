// Result codes of emu_launch (mirrored in grader/emulator/runtime.py).
#pragma once

namespace emu {
enum LaunchResult : int {
    kOk = 0,
    kLaunchFailure = 1,  // deadlock, divergent barrier, bad warp mask
    kTimeout = 2,
    kFault = 3,          // illegal address, stack overflow, arithmetic fault
    kTrap = 4,           // assert() or __trap()
    kInvalid = 5,        // the launch could not start
};
}  // namespace emu
