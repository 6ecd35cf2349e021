"""The grader's checks, one small module each; each check is one thing.

SGEMM stages (a function run(stage, source, seed) per module):

    compiles        the source compiles for the current backend (compiler output captured)
    correctness     fresh random inputs, non-square shapes that are not tile multiples plus a
                    large one, NaN-poisoned C with guard zones, float64 reference
    races           emulator analysis: races and out-of-bounds accesses, and a re-run in
                    permuted thread orders compared with the normal run
    bank_conflicts  emulator analysis: shared-memory bank conflicts (graded where the stage
                    requires none)
    performance     GPU only: GFLOPS against cuBLAS and the threshold in grader/grading/checks/thresholds.json

Labs 3 and 4: minimums (top-2, fused SGEMM + top-2, the host function) and
sssp (distances, path).

A check never raises for anything the student's code does: a failed compile
or launch becomes a failed grader.grading.report.CheckResult. The registry that names
them and binds their parameters, so that every check is run(submission,
seed), is grader.grading.registry; grader.grading.isolation runs each in its own process.
"""
