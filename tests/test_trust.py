"""Grading trusts nothing a notebook can write: the emulator's builds are keyed
and verified on load, and grading processes build into a private cache of
their own (grader.isolation.grading_cache), with an environment the grader
builds (not inherited)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import grader
from grader import isolation
from grader.emulator import build

from conftest import emulator_only

REPO = Path(__file__).resolve().parent.parent
STUB = """__global__ void sgemm_naive(int M, int N, int K, const float* A, const float* B, float* C)
{
    // YOUR CODE HERE
}
"""


def _entry(source: str) -> tuple[Path, Path, str]:
    lib = build.build_module(source).library
    key = lib.name[len("kernel-"):-len(".so")]
    return lib, lib.with_suffix(".json"), key


def _poison(forge_key: bool) -> tuple[Path, bytes]:
    """What the hostile cell did: the reference's build copied over the stub's
    cached build in the shared cache (with forge_key, its key and SHA-256
    rewritten to the stub's, so that it passes verification). Returns the
    stub's library path and the reference's bytes as planted."""
    stub_lib, stub_meta, stub_key = _entry(STUB)
    ref_lib, ref_meta, ref_key = _entry((REPO / "solutions" / "naive.cu").read_text())
    data = ref_lib.read_bytes()
    meta = json.loads(ref_meta.read_text())
    if forge_key:
        assert len(ref_key) == len(stub_key)
        data = data.replace(ref_key.encode(), stub_key.encode())
        meta.update(key=stub_key, sha256=__import__("hashlib").sha256(data).hexdigest())
    stub_lib.write_bytes(data)
    stub_meta.write_text(json.dumps(meta))
    return stub_lib, data


@emulator_only
def test_a_build_copied_over_another_is_rebuilt_not_loaded():
    stub_lib, planted = _poison(forge_key=False)
    again = build.build_module(STUB).library
    assert again == stub_lib and again.read_bytes() != planted
    assert build.verified(again, again.name[len("kernel-"):-len(".so")], again.with_suffix(".json"))


@emulator_only
@pytest.mark.parametrize("forge_key", [False, True])
def test_a_poisoned_shared_cache_earns_no_points(forge_key):
    """The attack of issue 17: a cell plants the reference's build under the
    stub's key in the shared cache; a blank notebook graded afterwards gets 0."""
    _poison(forge_key)
    report = grader.check("naive", STUB, ["correctness"], seed=1, fresh=True, announce=False)
    assert not report["correctness"].passed, report.text()
    assert isolation.child_env("emulator")["GRADER_EMULATOR_CACHE"] != str(build.cache_dir())


def test_grading_processes_get_an_environment_built_by_the_grader(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere/with/a/sitecustomize")
    monkeypatch.setenv("LD_PRELOAD", "/tmp/evil.so")
    monkeypatch.setenv("PYTHONSTARTUP", "/tmp/evil.py")
    env = isolation.child_env("emulator")
    assert env["PYTHONPATH"] == str(isolation.ROOT)
    assert "LD_PRELOAD" not in env and "PYTHONSTARTUP" not in env
    cache = Path(env["GRADER_EMULATOR_CACHE"])
    assert cache.is_dir() and (cache.stat().st_mode & 0o077) == 0          # private: 0700
    assert "-E" in isolation.child_command() and "-s" in isolation.child_command()


@emulator_only
def test_a_sitecustomize_on_the_path_does_not_reach_grading(tmp_path, monkeypatch):
    (tmp_path / "sitecustomize.py").write_text(
        "import grader.report as r\n"
        "r.CheckResult.__post_init__ = lambda self: (setattr(self, 'status', 'passed'), "
        "setattr(self, 'points', self.max_points))\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{REPO}")
    report = grader.check("naive", STUB, ["correctness"], seed=2, fresh=True, announce=False)
    assert not report["correctness"].passed
