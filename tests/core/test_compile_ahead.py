"""The first call's Numba compilation spread over processes (``ivote._compile``): the dry run lists
exactly the kernels a detection runs, a helper process's kernels are then loaded from the cache on
disk (compiled once, not twice), and a helper that fails or cannot help changes nothing but time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

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


def test_helper_compiles_its_share_into_the_cache_and_the_call_loads_it(kernels, monkeypatch):
    monkeypatch.setattr(_compile, "_START_WEIGHT", 0)  # tiny kernels: a helper only pays with a free start
    out = np.zeros(4)
    report = _compile.compile_ahead(lambda: _run(kernels, out), processes=2)
    assert report["needed"] == ["add", "scale"] and report["missing"] == ["add", "scale"]
    assert report["failed"] == 0 and len(report["helpers"]) == 1
    by_helper = report["helpers"][0]
    assert sorted(by_helper + report["here"]) == ["add", "scale"] and by_helper and report["here"]
    helped = getattr(kernels, by_helper[0])
    assert helped.signatures == []  # this process did not compile it...
    _run(kernels, out)
    assert helped.stats.cache_hits and not helped.stats.cache_misses  # ...it loaded the helper's work
    np.testing.assert_array_equal(out, -((2.0 * 3.0 + 1.0) + 1.0) * np.ones(4))
    # all compiled now: nothing is missing, no helper starts
    again = _compile.compile_ahead(lambda: _run(kernels, out), processes=2)
    assert again["missing"] == [] and again["helpers"] == []


def test_a_failing_helper_costs_only_time(kernels, monkeypatch):
    monkeypatch.setattr(_compile, "_START_WEIGHT", 0)
    monkeypatch.setattr(_compile, "_HELPER_CODE", "import sys; sys.exit(3)")
    out = np.zeros(3)
    report = _compile.compile_ahead(lambda: _run(kernels, out), processes=2)
    assert report["failed"] == 1 and len(report["here"]) == 1
    _run(kernels, out)  # the call compiles what the helper did not
    np.testing.assert_array_equal(out, -8.0 * np.ones(3))


def test_one_process_or_a_disabled_cache_starts_no_helper(kernels, monkeypatch):
    out = np.zeros(3)
    monkeypatch.setenv("IVOTE_COMPILE_PROCESSES", "1")
    report = _compile.compile_ahead(lambda: _run(kernels, out))
    assert report["missing"] == ["add", "scale"] and report["helpers"] == [] and report["here"] == []
    monkeypatch.setenv("IVOTE_COMPILE_PROCESSES", "two")  # not a number: a warning, one process
    assert _compile._processes() == 1
    monkeypatch.delenv("IVOTE_COMPILE_PROCESSES")
    monkeypatch.setattr(_compile, "_on_disk", lambda kernel, signature: None)  # the cache cannot be told
    monkeypatch.setattr(_compile, "_START_WEIGHT", 0)
    report = _compile.compile_ahead(lambda: _run(kernels, out), processes=4)
    assert report["helpers"] == [] and report["here"] == []


def test_small_jobs_stay_here_and_share_gives_the_helper_less_by_its_start():
    assert _compile._share([("a", None, 200), ("b", None, 200)], 1)[1] == []  # not worth a start
    jobs = [("a", None, 900), ("b", None, 500), ("c", None, 400), ("d", None, 300)]
    here, helper = _compile._share(jobs, 1)
    loads = [sum(job[2] for job in here), _compile._START_WEIGHT + sum(job[2] for job in helper)]
    assert sorted(job[0] for job in here + helper) == ["a", "b", "c", "d"]
    assert abs(loads[0] - loads[1]) <= 900  # the longest job bounds the imbalance
    assert here[0][0] == "a"  # longest first, to the idle process


_FIRST_DETECTION = """
import json
import ivote
from ivote.detect import _numba
reports = []
original = _numba.compile_ahead
_numba.compile_ahead = lambda run, processes=None: reports.append(original(run, 2)) or reports[-1]
image = ivote.synthetic_nuclei((64, 80), radius=5.0, seed=3).image
found = ivote.iterative_voting(image, radius=5.0, backend="numba")
kernels = {name: k for name, k in vars(_numba).items() if hasattr(k, "stats") and hasattr(k, "py_func")}
stats = {name: [sum(k.stats.cache_hits.values()), sum(k.stats.cache_misses.values())] for name, k in kernels.items()}
callees = {name: [c for c in k.py_func.__code__.co_names if c in kernels] for name, k in kernels.items()}
print(json.dumps({"report": reports[0], "stats": stats, "callees": callees, "points": len(found.points)}))
"""


def test_first_detection_in_a_fresh_process_compiles_each_kernel_once(tmp_path):
    """Empty cache, two processes: each kernel the detection ran was listed by the dry run and
    compiled once, here or by the helper (whose kernels this process loaded, not compiled)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), IVOTE_BACKEND="numba")
    env.pop("IVOTE_COMPILE_PROCESSES", None)
    done = subprocess.run([sys.executable, "-c", _FIRST_DETECTION], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    report, stats, callees = result["report"], result["stats"], result["callees"]
    assert result["points"] > 0 and report["failed"] == 0 and report["helpers"] and report["here"]
    assert report["missing"] == report["needed"]  # an empty cache
    helped = {name for share in report["helpers"] for name in share}
    assert helped.isdisjoint(report["here"]) and helped | set(report["here"]) == set(report["needed"])

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
