"""The grader's checks: one module per SGEMM check, one per lab for the other exercises.

SGEMM stages (each module's CHECK; the stage comes in the Context):

    compiles                the source compiles for the current backend (compiler output captured)
    correctness             fresh random inputs, non-square shapes that are not tile multiples plus a
                            large one, NaN-poisoned C with guard zones, float64 reference
    races                   emulator analysis: races and out-of-bounds accesses, and a re-run in
                            permuted thread orders compared with the normal run
    bank_conflicts          emulator analysis: shared-memory bank conflicts (graded where the stage
                            requires none)
    bank_conflicts_configs  correct and conflict-free under other tile configurations
    coalescing              emulator analysis: global-memory sectors per warp request
    alignment               the float4 path and its scalar fallback, misaligned views
    performance             GPU only: GFLOPS against cuBLAS and the threshold in thresholds.json

Labs (their CHECKS): pycuda_by_hand (lab 00), blocks_per_sm (lab 03),
padded_transpose (lab 04), autotuning (lab 06), minimums (lab 07),
shortest_paths (lab 08).

Shared by them: common (compiling, guarded launches, readable launch failures), analysed_launch and
emulator_tools (the emulator's analysis), wrong_patterns (what the pattern of wrong elements suggests).

A check never raises for anything the student's code does: a failed compile or
launch becomes a failed grader.grading.report.CheckResult. The registry that
names them is grader.grading.registry; grader.grading.isolation runs each.
"""
