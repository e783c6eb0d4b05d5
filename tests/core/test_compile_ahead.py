"""The first call's Numba compilation spread over processes (``ivote._compile``): the dry run lists
exactly the kernels a detection runs, a helper process's kernels are then loaded from the cache on
disk (compiled once, not twice), and a helper that fails or cannot help changes nothing but time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

pytest.importorskip("numba")

from ivote import _compile  # noqa: E402
from ivote._parallel import for_ranges, recording  # noqa: E402

_KERNELS = '''
from numba import njit


@njit(cache=True, nogil=True)
def add(first, last, out, value):
    for i in range(first, last):
        out[i] += value


@njit(cache=True, nogil=True)
def scale(first, last, out, factor):
    for i in range(first, last):
        out[i] = out[i] * factor + 1.0
'''


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """A module of two cached kernels no other test compiled (its own folder, so its own cache)."""
    name = f"ivote_test_kernels_{os.getpid()}_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(_KERNELS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)  # __pycache__ beside the module
    monkeypatch.delenv("NUMBA_DISABLE_JIT", raising=False)
    module = __import__(name)
    yield module
    sys.modules.pop(name, None)


def _run(module, out):
    for_ranges(module.add, len(out), out, 2.0)
    for_ranges(module.scale, len(out), out, np.float32(3.0))
    for_ranges(module.add, len(out), out, 1.0)  # the same signature again: listed once
    out[:] = -out  # plain Python between kernels still runs


def test_recording_runs_no_kernel_and_lists_each_signature_once(kernels):
    out = np.ones(5)
    with recording() as calls:
        _run(kernels, out)
    assert [kernel.py_func.__name__ for kernel, _ in calls] == ["add", "scale", "add"]
    np.testing.assert_array_equal(out, -np.ones(5))  # no kernel ran, the Python line did
    assert kernels.add.signatures == [] and kernels.scale.signatures == []  # nothing compiled
    _run(kernels, out)  # outside: they run
    np.testing.assert_array_equal(out, -(((-1.0 + 2.0) * 3.0 + 1.0) + 1.0) * np.ones(5))


def _helper_first(monkeypatch):
    """This process starts on its jobs once the helper has taken the first (not before: a helper
    that starts late takes none, and a test of its work then tests nothing)."""
    original = _compile._work

    def wait_for_the_helper(jobs, folder, kernels_):
        deadline = time.time() + 120
        while len(os.listdir(folder)) == 0 and time.time() < deadline:
            time.sleep(0.01)  # the helper takes the first job...
        return original(jobs, folder, kernels_)  # ...and this process the next, unless the helper was quicker

    monkeypatch.setattr(_compile, "_work", wait_for_the_helper)


def test_helper_compiles_what_it_takes_into_the_cache_and_the_call_loads_it(kernels, monkeypatch):
    out = np.zeros(4)
    _helper_first(monkeypatch)
    report = _compile.compile_ahead(lambda: _run(kernels, out), processes=2)
    monkeypatch.undo()
    assert report["needed"] == ["add", "scale"] and report["missing"] == ["add", "scale"]
    assert report["failed"] == 0 and report["helpers"] == 1
    assert report["elsewhere"] and len(report["here"]) <= 1  # the helper may take both (this process slowed)
    assert sorted(report["elsewhere"] + report["here"]) == ["add", "scale"]
    helped = getattr(kernels, report["elsewhere"][0])
    assert helped.signatures == []  # this process did not compile it...
    _run(kernels, out)
    assert helped.stats.cache_hits and not helped.stats.cache_misses  # ...it loaded the helper's work
    np.testing.assert_array_equal(out, -((2.0 * 3.0 + 1.0) + 1.0) * np.ones(4))
    # all compiled now: nothing is missing, no helper starts
    again = _compile.compile_ahead(lambda: _run(kernels, out), processes=2)
    assert again["missing"] == [] and again["helpers"] == 0


def test_helper_writes_to_the_cache_this_process_reads(kernels, monkeypatch, tmp_path):
    """NUMBA_CACHE_DIR set (or unset) after Numba's import: this process's Numba still reads the
    folder it read then; the helper writes there too, not where the environment now says."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "elsewhere"))
    _helper_first(monkeypatch)
    out = np.zeros(4)
    report = _compile.compile_ahead(lambda: _run(kernels, out), processes=2)
    assert report["failed"] == 0 and report["elsewhere"]
    for name in report["elsewhere"]:
        assert getattr(kernels, name).signatures == []
    _run(kernels, out)
    for name in report["elsewhere"]:
        assert not getattr(kernels, name).stats.cache_misses, name  # loaded, not compiled again


def test_a_failing_helper_costs_only_time(kernels, monkeypatch):
    monkeypatch.setattr(_compile, "_HELPER_CODE", "import sys; sys.exit(3)")
    out = np.zeros(3)
    report = _compile.compile_ahead(lambda: _run(kernels, out), processes=2)
    assert report["failed"] == 1 and sorted(report["here"]) == ["add", "scale"]  # this process did it all
    _run(kernels, out)
    np.testing.assert_array_equal(out, -8.0 * np.ones(3))


def test_one_process_or_a_disabled_cache_starts_no_helper(kernels, monkeypatch):
    out = np.zeros(3)
    monkeypatch.setenv("IVOTE_COMPILE_PROCESSES", "1")
    report = _compile.compile_ahead(lambda: _run(kernels, out))
    assert report["missing"] == ["add", "scale"] and report["helpers"] == 0 and report["here"] == []
    monkeypatch.setenv("IVOTE_COMPILE_PROCESSES", "two")  # not a number: a warning, one process
    assert _compile._processes() == 1
    monkeypatch.delenv("IVOTE_COMPILE_PROCESSES")
    monkeypatch.setattr(_compile, "_on_disk", lambda kernel, signature: None)  # the cache cannot be told
    report = _compile.compile_ahead(lambda: _run(kernels, out), processes=4)
    assert report["helpers"] == 0 and report["here"] == []


def test_a_failing_or_warning_dry_run_leaves_the_call_alone(kernels):
    """The dry run reads arrays no kernel filled: neither a failure in it nor a floating-point
    warning about their contents reaches the caller (whose call then compiles its own kernels)."""
    def fails():
        for_ranges(kernels.add, 3, np.zeros(3), 1.0)
        raise IndexError("an index from an array no kernel filled")

    report = _compile.compile_ahead(fails, processes=2)
    assert report["needed"] == [] and report["helpers"] == 0 and kernels.add.signatures == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _compile.compile_ahead(lambda: np.full(2, 1e308) * 10.0, processes=1)  # overflow: no warning


def test_each_job_is_taken_once_longest_first(tmp_path, kernels):
    assert [_compile._take(str(tmp_path), i) for i in (0, 1, 0, 1, 2)] == [True, True, False, False, True]
    from ivote.detect import _numba

    weights = {name: _compile._weight(getattr(_numba, name)) for name in ("_voters", "_vote", "_blur_across")}
    assert weights["_voters"] > weights["_vote"] > weights["_blur_across"]  # 1.35, 0.69, 0.37 s measured


_FIRST_CALL = """
import json, os, time
import ivote
from ivote import _compile
from ivote.detect import _numba as detect_kernels
from ivote.segment import _numba as segment_kernels
module = {"detect": detect_kernels, "segment": segment_kernels}[STAGE]
reports = []
original_work = _compile._work
def work_after_the_helper(jobs, folder, kernels):  # the helper takes the first job: it surely has one
    deadline = time.time() + 120
    while not os.listdir(folder) and time.time() < deadline:
        time.sleep(0.01)
    return original_work(jobs, folder, kernels)
_compile._work = work_after_the_helper
original = _compile.compile_ahead  # called by _compile.compile_ahead_once, which both stages use
_compile.compile_ahead = lambda run, processes=None: reports.append(original(run, 2)) or reports[-1]
sample = ivote.synthetic_nuclei((64, 80), radius=5.0, seed=3)
if STAGE == "detect":
    found = len(ivote.iterative_voting(sample.image, radius=5.0, backend="numba").points)
else:
    found = int(ivote.segment_nuclei(sample.image, sample.centers, radius=5.0, iterations=4, reinit_every=2,
                                     backend="numba").max())
kernels = {name: k for name, k in vars(module).items() if hasattr(k, "stats") and hasattr(k, "py_func")}
stats = {name: [sum(k.stats.cache_hits.values()), sum(k.stats.cache_misses.values())] for name, k in kernels.items()}
callees = {name: [c for c in k.py_func.__code__.co_names if c in kernels] for name, k in kernels.items()}
print(json.dumps({"report": reports[0], "stats": stats, "callees": callees, "found": found}))
"""


@pytest.mark.parametrize("stage", ["detect", "segment"])
def test_first_call_in_a_fresh_process_compiles_each_kernel_once(tmp_path, stage):
    """Empty cache, two processes: each kernel the call ran was listed by the dry run and
    compiled once, here or by the helper (whose kernels this process loaded, not compiled)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), IVOTE_CACHE_DIR=str(tmp_path / "ivote"),
               IVOTE_BACKEND="numba")
    env.pop("IVOTE_COMPILE_PROCESSES", None)
    done = subprocess.run([sys.executable, "-c", f"STAGE = {stage!r}\n" + _FIRST_CALL], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["found"] > 0
    report, stats, callees = result["report"], result["stats"], result["callees"]
    assert report["failed"] == 0 and report["helpers"] == 1 and report["here"]
    assert report["missing"] == report["needed"]  # an empty cache
    helped = set(report["elsewhere"])
    assert helped and helped.isdisjoint(report["here"]) and helped | set(report["here"]) == set(report["needed"])

    def reach(names):
        found, todo = set(), list(names)
        while todo:
            name = todo.pop()
            if name not in found:
                found.add(name)
                todo += callees[name]
        return found

    for name in helped:
        assert stats[name] == [1, 0], (name, stats[name])  # loaded from the helper's files, not compiled
    for name in report["here"]:
        assert stats[name] == [0, 1], (name, stats[name])  # compiled here, once
    compiled_here = {name for name, (hits, misses) in stats.items() if misses}
    assert compiled_here <= reach(report["here"])  # nothing compiled here that the dry run missed
    used = {name for name, (hits, misses) in stats.items() if hits + misses}
    assert used <= reach(report["needed"])


def test_compile_ahead_once_runs_the_first_call_of_a_key_only(kernels, monkeypatch):
    calls = []
    monkeypatch.setattr(_compile, "compile_ahead", lambda run: calls.append(run) or {"needed": []})
    key = ("test", id(kernels))
    assert _compile.compile_ahead_once(key, "first") == {"needed": []}
    assert _compile.compile_ahead_once(key, "second") is None
    assert _compile.compile_ahead_once(key + ("other",), "third") == {"needed": []}
    assert calls == ["first", "third"]
