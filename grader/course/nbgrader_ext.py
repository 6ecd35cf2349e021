"""nbgrader extensions for the SGEMM labs.

ClearCudaSolutions: the labs keep CUDA C in Python strings (KERNEL_SOURCE =
r'''...'''). A solution region whose delimiter lines are C++ comments
(`// BEGIN SOLUTION` ... `// END SOLUTION`) becomes `// YOUR CODE HERE`, so
the release copy still compiles (and fails the tests); a Python region that
only assigns names (a numeric question) becomes `NAME = None  # YOUR ANSWER
HERE`, so the release copy runs from top to bottom; any other Python region
keeps nbgrader's stub (`# YOUR CODE HERE` / `raise NotImplementedError()`).

HideTestErrors (feedback): a graded test cell that raised shows a sentence
instead of its traceback, which would show the hidden test's lines.

The autograde pipeline (nbgrader_config.py) trusts nothing a notebook's
cells do:
- SandboxedExecute runs the notebook in a kernel in the sandbox of student
  code (grader.platform.sandbox: uid 65534, no capabilities, the answers, the
  gradebook and every student's folder hidden, its own process namespace,
  a copy of the notebook's folder its only writable place); a kernel that
  dies (os._exit) ends the run, not the autograde.
- GradeFromSource then grades every test cell from the notebook's text (its
  hidden test restored by nbgrader, the student's values read without running
  them: grader.course.regrade), each check in a fresh sandboxed process, and writes
  that result in place of what the cell printed. Whatever a cell patched
  (numpy, the grader, the display hook) or planted (a build in a cache)
  cannot change a score. What a submission tried (a refused source, a
  forbidden system call, code naming the gradebook or mounts) goes to
  nbgrader's log, and with the scores to GradeFromSource.record when set.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import nbformat
from jupyter_client import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.preprocessors import ClearSolutions, Execute, NbGraderPreprocessor
from traitlets import Unicode

from grader.course import gradebook
from grader.course.regrade import parse_test, regrade_at, tried_in_text
from grader.course.static_values import code_cells
from grader.platform import sandbox, settings

CUDA_COMMENT = re.compile(r"^\s*//")


class ClearCudaSolutions(ClearSolutions):
    cuda_code_stub = Unicode("// YOUR CODE HERE", help="The stub for a solution region inside CUDA C source").tag(
        config=True)

    def _replace_solution_region(self, cell, language):
        lines = cell.source.split("\n")
        if cell.cell_type == "code":
            python_stub = self.code_stub[language].split("\n")
        else:
            python_stub = self.text_stub.split("\n")
        new_lines = []
        region = None            # (indent, is CUDA, lines) while inside a solution region
        replaced = False
        for line in lines:
            if self.begin_solution_delimeter in line:
                if region is not None:
                    self.log.error("Encountered nested begin solution statements. Cell contents are: \n%s",
                                   cell.source)
                    raise RuntimeError("encountered nested begin solution statements")
                cuda = cell.cell_type == "code" and bool(CUDA_COMMENT.match(line))
                region = (re.match(r"\s*", line).group(0), cuda, [])
                replaced = True
            elif self.end_solution_delimeter in line and region is not None:
                indent, cuda, body = region
                stub = self.cuda_code_stub.split("\n") if cuda else (answer_stub(body) or python_stub)
                new_lines.extend(indent + s for s in stub)
                region = None
            elif region is not None:
                region[2].append(line)
            else:
                new_lines.append(line)
        if region is not None:
            self.log.error("No end solution statement found. Cell contents are: \n%s", cell.source)
            raise RuntimeError("no end solution statement found")
        cell.source = "\n".join(new_lines)
        return replaced


def answer_stub(body: list[str]) -> list[str] | None:
    """`NAME = None  # YOUR ANSWER HERE` for each name a region assigns, when the
    region only assigns names (a numeric question): the release copy then runs
    from top to bottom and its test cell says "not answered yet". None otherwise."""
    try:
        tree = ast.parse(textwrap.dedent("\n".join(body)))
    except SyntaxError:
        return None
    names = []
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return None
        names.append(stmt.targets[0].id)
    return [f"{name} = None  # YOUR ANSWER HERE" for name in names] or None


class HideTestErrors(NbGraderPreprocessor):
    """Feedback: a graded test cell that raised shows the student a sentence,
    never the traceback (IPython prints the failing lines of the hidden test,
    expected values included) nor anything the test wrote to stderr. (An
    NbGraderPreprocessor, as GradeFromSource: nbconvert's are disabled by default.)"""

    message = Unicode("this test failed with {ename}; the test's source and its expected values are hidden "
                      "(your score for this cell is above)").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            return cell, resources
        outputs = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                outputs.append(nbformat.v4.new_output("stream", name="stdout", text=self.message.format(
                    ename=re.sub(r"[^\w.]", "", str(out.get("ename", "an error")))[:60]) + "\n"))
            elif out.get("output_type") == "stream" and out.get("name") == "stderr":
                continue
            else:
                outputs.append(out)
        cell.outputs = outputs
        return cell, resources


# ---- autograde: a sandboxed kernel, then grades computed from the notebook's text -----------
def protect_course(config) -> None:
    """Hide the course nbgrader grades (and, when it grades in a scratch copy, the real course:
    SandboxedExecute.real_course) from every sandboxed process this process starts."""
    from nbgrader.coursedir import CourseDirectory  # nbgrader: the instructor's extra
    paths = gradebook.course_paths(CourseDirectory(config=config))
    real = config.get("SandboxedExecute", {}).get("real_course")
    if real:
        paths += gradebook.protected_paths(Path(real))
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
            return kernel_limits() + cmd, kw
        private = tempfile.mkdtemp(prefix="grader-kernel-")
        self._private = private
        work = os.path.join(private, "work")         # the notebook's folder, copied: what it writes goes nowhere
        shutil.copytree(Path(kw.get("cwd") or os.getcwd()).resolve(), work, symlinks=True)
        connection = os.path.join(private, "connection.json")
        shutil.copy(self.connection_file, connection)
        cmd = [connection if arg == self.connection_file else arg for arg in cmd]
        env = dict(kw.get("env") or os.environ)
        env.update(TMPDIR=private, HOME=private, IPYTHONDIR=os.path.join(private, "ipython"),
                   MPLCONFIGDIR=os.path.join(private, "matplotlib"),
                   GRADER_EMULATOR_CACHE=os.path.join(private, "emulator-cache"))
        kw["env"] = env
        kw["cwd"] = work
        python = os.path.dirname(os.path.dirname(os.path.realpath(cmd[0])))
        imports = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p)]
        gpu = settings.current().backend != "emulator"
        return sandbox.wrap(kernel_limits(sandboxed=True) + cmd, [private], work, hidden=sandbox.hidden_from_student_code(),
                            gpu=gpu, network=True, readable=[python, *imports]), kw

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if getattr(self, "_private", None) and not restart:
            shutil.rmtree(self._private, ignore_errors=True)


class SandboxedExecute(Execute):
    """nbgrader's Execute in a SandboxedKernelManager kernel. A kernel that
    dies (a cell calling os._exit, a crash) or stops answering stops the run there; the cells
    before it keep their outputs and the autograde goes on (GradeFromSource
    grades every test cell from the text anyway)."""

    real_course = Unicode("", help="The course whose scratch copy is being graded (python -m grader "
                          "autograde): its folders are hidden from the kernel too").tag(config=True)

    def __init__(self, *args, **kwargs):
        kwargs["kernel_manager_class"] = SandboxedKernelManager
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, resources=None, km=None):
        protect_course(self.config)
        try:
            return super().preprocess(nb, resources, km)
        except (DeadKernelError, CellTimeoutError) as e:
            self.log.warning("the notebook's run stopped early: %s", str(e).splitlines()[0] if str(e) else e)
            return nb, resources

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        # IPython never replies to a cell whose compilation overflows the stack (a 100,000-term sum):
        # that cell would cost its whole time limit. Compiling it here (nothing runs) finds it first.
        if cell.cell_type == "code":
            try:
                compile(cell.source, f"<cell {cell_index}>", "exec")
            except (RecursionError, MemoryError) as e:
                cell.outputs = [nbformat.v4.new_output("error", ename=type(e).__name__, evalue=str(e)[:200],
                                                       traceback=[f"{type(e).__name__}: {e}"[:300]])]
                return cell
            except (SyntaxError, ValueError):
                pass                    # magics, or a real syntax error: the kernel says which
        return await super().async_execute_cell(cell, cell_index, execution_count, store_history)


class GradeFromSource(NbGraderPreprocessor):
    """Every graded test cell that calls grader.grade or grader.grade_answer
    scores what those calls give when recomputed from the notebook's text
    (grader.course.regrade.regrade_cell, checks in fresh sandboxed processes): its
    outputs become that diagnosis and that score. A value that cannot be read
    without running the notebook scores 0, with the reason. Other test cells
    (an instructor's own asserts) keep nbgrader's verdict on their execution."""

    not_readable = Unicode(
        "0 points: the autograder grades this cell from your notebook's text, without running your code, and "
        "could not read what it grades ({why}). Write it as a literal, ordinary string operations on literals "
        "are fine, and ask your instructor to look at this cell.").tag(config=True)

    record = Unicode("", help="A JSON file where the scores computed here are recorded, by notebook and cell, "
                     "with what the submission tried (python -m grader autograde merges from it)").tag(config=True)

    def preprocess(self, nb, resources):
        protect_course(self.config)
        # nbgrader marks its own process as autograding too: here (trusted) the checks must run.
        saved = os.environ.pop("NBGRADER_EXECUTION", None)
        try:
            scores, tried = self._grade(nb)
        finally:
            if saved is not None:
                os.environ["NBGRADER_EXECUTION"] = saved
        info = resources.get("nbgrader", {})
        for what in tried:
            self.log.warning("%s tried something the grader stops: %s", info.get("student", "the submission"), what)
        if self.record:
            self._write_record(info.get("notebook", ""), scores, tried)
        return nb, resources

    def _grade(self, nb) -> tuple[dict, list]:
        """Every test cell graded from the text: ({grade_id: score}, what the submission tried)."""
        cells = code_cells(nb)
        scores, tried = {}, []
        for i, cell in enumerate(cells):
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if not meta.get("grade") or meta.get("solution") or not parse_test(cell.source):
                continue
            r, _ = regrade_at(cells, i, cell.source)
            if r.score is None:
                score, text = 0.0, self.not_readable.format(why=r.note.replace("not recomputed: ", ""))
            else:
                score, text = r.score, r.text
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n"),
                            nbformat.v4.new_output("execute_result", data={"text/plain": repr(float(score))},
                                                   execution_count=cell.get("execution_count"))]
            scores[meta["grade_id"]] = float(score)
            tried += [f"{meta['grade_id']}: {a}" for a in r.attempts]
        return scores, tried + tried_in_text(cells)

    def _write_record(self, notebook: str, scores: dict, tried: list) -> None:
        path = Path(self.record)
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            record = {}
        record[notebook] = {"scores": scores, "tried": tried}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
