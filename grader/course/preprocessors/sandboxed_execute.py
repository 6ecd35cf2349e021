"""SandboxedExecute (autograde): the notebook runs in a kernel in the sandbox of student code
(grader.platform.sandbox: uid 65534, no capabilities, the answers, the gradebook and every student's
folder hidden, its own process namespace, a copy of the notebook's folder its only writable place); a
kernel that dies (os._exit) ends the run, not the autograde. Nothing it does is trusted: GradeFromSource
grades every test cell afterwards."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
from jupyter_client import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.preprocessors import Execute
from traitlets import Unicode

from grader.course import gradebook
from grader.grading import isolation
from grader.kernels import timing
from grader.platform import interpreter, sandbox, settings

_lock_paths: list[str] = []     # the GPU's lock, held for the kernel running now: hidden from it
# jupyter_client's words for a kernel that never answered its first message, before any cell ran: its ports,
# chosen free, can be taken by another process before it binds them. Another kernel is started then.
NEVER_ANSWERED = ("Kernel didn't respond in", "Kernel died before replying to kernel_info")
KERNEL_STARTS = 2


def protect_course(config) -> None:
    """Hide the course nbgrader grades (and, when it grades in a scratch copy, the real course:
    SandboxedExecute.real_course) and nbgrader's exchange (every student's submissions and feedback)
    from every sandboxed process this process starts."""
    from nbgrader.coursedir import CourseDirectory  # nbgrader: the instructor's extra
    from nbgrader.exchange.default.exchange import Exchange
    paths = gradebook.course_paths(CourseDirectory(config=config))
    real = config.get("SandboxedExecute", {}).get("real_course")
    if real:
        paths += gradebook.protected_paths(Path(real))
    paths.append(Path(config.get("Exchange", {}).get("root") or Exchange.root.default_value))
    sandbox.protect(paths)


def kernel_limits(sandboxed: bool = False) -> list[str]:
    """A prefix that caps the kernel's data memory (a cell's `"x" * 10**12` fails
    at once with MemoryError instead of paging for the cell's whole time limit).
    RLIMIT_DATA, not RLIMIT_AS: the CUDA driver reserves far more address space
    than it uses (checked with PyCUDA on the H200). `sandboxed`: the kernel's
    parent is process 1 of its own PID namespace, which ipykernel must not poll
    (the sandbox ends with its parent anyway)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        physical = 32 << 30
    limit = min(16 << 30, physical * 3 // 4)
    parent = "os.environ['JPY_PARENT_PID'] = '1'; " if sandboxed else ""
    return [sys.executable, "-c", f"import os, resource, sys; {parent}resource.setrlimit(resource.RLIMIT_DATA, "
            f"({limit}, {limit})); os.execv(sys.argv[1], sys.argv[1:])"]


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel in the sandbox of student code (grader.platform.sandbox): a copy of the notebook's folder
    and a private folder its only writable ones, the answers and every protected course path hidden,
    the network kept (the kernel talks to nbgrader over TCP on localhost). Where no sandbox can be
    made, as usual, with the reason in nbgrader's log."""

    async def _async_pre_start_kernel(self, **kw):
        cmd, kw = await super()._async_pre_start_kernel(**kw)
        tool, why = sandbox.mechanism()
        if not tool:
            self.log.warning("autograde kernel not sandboxed: %s", why)
            if _lock_paths:
                kw["env"] = {**(kw.get("env") or os.environ), "GRADER_GPU_LOCK_HELD": timing.NOTEBOOK}
            return kernel_limits() + cmd, kw
        private = tempfile.mkdtemp(prefix="grader-kernel-")
        self._private = private
        work = os.path.join(private, "work")         # the notebook's folder, copied: what it writes goes nowhere
        shutil.copytree(Path(kw.get("cwd") or os.getcwd()).resolve(), work, symlinks=True)
        connection = os.path.join(private, "connection.json")
        shutil.copy(self.connection_file, connection)
        cmd = [connection if arg == self.connection_file else arg for arg in cmd]
        cache = os.path.join(private, "emulator-cache")
        isolation.seed_cache(cache)
        env = dict(kw.get("env") or os.environ)
        env.update(TMPDIR=private, HOME=private, IPYTHONDIR=os.path.join(private, "ipython"),
                   MPLCONFIGDIR=os.path.join(private, "matplotlib"), GRADER_EMULATOR_CACHE=cache)
        if _lock_paths:                 # its own timings run under the lock held for it (shown, never graded)
            env["GRADER_GPU_LOCK_HELD"] = timing.NOTEBOOK
        gpu = settings.current().backend != "emulator"
        env.update(interpreter.blas_threads(gpu))
        kw["env"] = env
        kw["cwd"] = work
        python = os.path.dirname(os.path.dirname(os.path.realpath(cmd[0])))
        imports = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p)]
        hidden = sandbox.hidden_from_student_code() + _lock_paths
        return sandbox.wrap(kernel_limits(sandboxed=True) + cmd, [private], work, hidden=hidden,
                            gpu=gpu, network=True, readable=[python, *imports]), kw

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if getattr(self, "_private", None) and not restart:
            shutil.rmtree(self._private, ignore_errors=True)

    # nbclient cleans up a kernel that died before answering with cleanup_resources, which
    # AsyncKernelManager binds to KernelManager's own coroutine, not to the override above
    cleanup_resources = _async_cleanup_resources


class SandboxedExecute(Execute):
    """nbgrader's Execute in a SandboxedKernelManager kernel. A kernel that
    dies (a cell calling os._exit, a crash) or stops answering stops the run there; the cells
    before it keep their outputs and the autograde goes on (GradeFromSource
    grades every test cell from the text anyway). One that never answered, before any cell, is
    started again on other ports."""

    real_course = Unicode("", help="The course whose scratch copy is being graded (python -m grader "
                          "autograde): its folders are hidden from the kernel too").tag(config=True)

    def __init__(self, *args, **kwargs):
        kwargs["kernel_manager_class"] = SandboxedKernelManager
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, resources=None, km=None):
        """The run holds the GPU's lock shared (grader.kernels.timing): no other submission's kernel is
        timed while this notebook can use the GPU; the kernel cannot see the lock."""
        global _lock_paths
        protect_course(self.config)
        with timing.held_for_child(times=False, wait_s=isolation.GPU_WAIT_S) as held:
            _lock_paths = list(held.hidden)
            try:
                for attempt in range(1, KERNEL_STARTS + 1):
                    try:
                        return super().preprocess(nb, resources, km)
                    except (DeadKernelError, CellTimeoutError) as e:
                        self.log.warning("the notebook's run stopped early: %s",
                                         str(e).splitlines()[0] if str(e) else e)
                        return nb, resources
                    except RuntimeError as e:
                        if not str(e).startswith(NEVER_ANSWERED) or attempt == KERNEL_STARTS:
                            raise
                        self.log.warning("the kernel never answered (%s): starting another", e)
            finally:
                _lock_paths = []

    def preprocess_cell(self, cell, resources, index):
        # IPython never replies to a cell whose compilation overflows the stack (a 100,000-term sum):
        # that cell would cost its whole time limit. Compiling it here (nothing runs) finds it first.
        # (Here, not in async_execute_cell: nbclient's execute_cell calls its own, not an override.)
        if cell.cell_type == "code":
            try:
                compile(cell.source, f"<cell {index}>", "exec")
            except (RecursionError, MemoryError) as e:
                cell.outputs = [nbformat.v4.new_output("error", ename=type(e).__name__, evalue=str(e)[:200],
                                                       traceback=[f"{type(e).__name__}: {e}"[:300]])]
                return cell, resources
            except (SyntaxError, ValueError):
                pass                    # magics, or a real syntax error: the kernel says which
        return super().preprocess_cell(cell, resources, index)
