"""Kernels under threads and processes, and a build cache that survives what users do to it.

Threads making the first call of new kernels together compile each once and never touch the
process's working directory; kernels pickle by reference and run in multiprocessing (fork and
spawn), concurrent.futures, joblib and a dask cluster; a read-only or broken cache directory
degrades to a private build with a warning; what killed builds leave behind is cleaned; the
source compiled is the source imported.
"""
from __future__ import annotations

import concurrent.futures
import importlib
import multiprocessing
import os
import pathlib
import pickle
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest

import fsmooth as fs
from fsmooth import cache, runtime
from fsmooth.artifact import CArtifact

REPO = pathlib.Path(__file__).resolve().parents[1]


def _fresh_module(tmp_path, monkeypatch, name: str, text: str):
    """Import ``text`` as module ``name`` from ``tmp_path`` (kernels no other test compiled)."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    return importlib.import_module(name)


def _scaled_kernels(count: int, salt: str) -> str:
    kernels = "".join(f"""
@fs.kernel
def scale_{i}(a: Array[Double]) -> Array[Double]:
    return build(length(a), lambda j: a[j] * {i + 1}.0 + {salt})
""" for i in range(count))
    return "import fsmooth as fs\nfrom fsmooth import Array, Double, build, length\n" + kernels


def test_first_calls_from_many_threads_compile_once_and_keep_the_working_directory(tmp_path, monkeypatch):
    module = _fresh_module(tmp_path, monkeypatch, "threads_first_call", _scaled_kernels(4, "0.25"))
    kernels = [getattr(module, f"scale_{i}") for i in range(4)]
    cwd, seen, stop = os.getcwd(), set(), threading.Event()

    def watch():
        while not stop.is_set():
            seen.add(os.getcwd())

    a = np.arange(5.0)
    barrier = threading.Barrier(8)

    def call(t):
        barrier.wait()
        k = kernels[t % 4]
        return t % 4, k(a)

    watcher = threading.Thread(target=watch)
    watcher.start()
    before = cache.build_count
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(call, range(8)))
    finally:
        stop.set()
        watcher.join()
    for i, out in results:
        np.testing.assert_array_equal(out, a * (i + 1) + 0.25)
    assert cache.build_count - before == 4  # one build per kernel, not per thread
    assert seen == {cwd} and os.getcwd() == cwd


# ----------------------------------------------------------------------------- pickling

def test_a_kernel_pickles_by_reference():
    from fsmooth import examples

    assert pickle.loads(pickle.dumps(examples.vector_add)) is examples.vector_add
    variant = examples.vector_add.with_options(fusion=False)
    again = pickle.loads(pickle.dumps(variant))
    assert again.options == variant.options and again.fn is examples.vector_add.fn
    assert again is variant  # one kernel object per options


def test_a_local_kernel_says_why_it_cannot_pickle():
    @fs.kernel
    def local(x: fs.Double) -> fs.Double:
        return x + 1.0

    with pytest.raises(pickle.PicklingError, match="define it at the top level of a module"):
        pickle.dumps(local)


def _norm_in_worker(n: int) -> float:
    from fsmooth import examples

    v = np.arange(float(n))
    return examples.f(v, v)


def _call_kernel(k, n: int) -> float:
    v = np.arange(float(n))
    return k(v, v)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_kernels_go_to_a_multiprocessing_pool(method):
    from fsmooth import examples

    with multiprocessing.get_context(method).Pool(2) as pool:
        results = pool.starmap(_call_kernel, [(examples.f, n) for n in (0, 3, 100)])
        assert results == [_norm_in_worker(n) for n in (0, 3, 100)]


def test_kernels_go_to_a_process_pool_executor_and_joblib():
    import joblib

    from fsmooth import examples

    expected = [_norm_in_worker(n) for n in (1, 7)]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        assert list(pool.map(_call_kernel, [examples.f] * 2, (1, 7))) == expected
    assert joblib.Parallel(n_jobs=2)(joblib.delayed(_call_kernel)(examples.f, n) for n in (1, 7)) == expected


# ----------------------------------------------------------------------------- the cache

def _artifact(value: float) -> CArtifact:
    source = f"double constant(void) {{ return {value!r}; }}\n"
    return CArtifact(source, "double constant(void);", {})


def _loaded_constant(value: float) -> float:
    return cache.load_module(*_key(value)).lib.constant()


def _key(value: float) -> tuple:
    a = _artifact(value)
    return a.source, a.cdef, a.compile_args, a.libraries


def test_a_cache_directory_that_cannot_be_written_degrades_with_a_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(blocker / "cache"))
    with pytest.warns(RuntimeWarning, match="cannot be used"):
        assert _loaded_constant(1.5) == 1.5


def test_a_directory_where_a_manifest_belongs_degrades_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(tmp_path))
    name = cache.module_name(cache.cache_key(*_key(2.5)))
    (tmp_path / f"{name}.json").mkdir()
    with pytest.warns(RuntimeWarning, match="cannot be used"):
        assert _loaded_constant(2.5) == 2.5


def test_what_killed_builds_left_is_removed_by_the_next_build(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(tmp_path))
    old = time.time() - 2 * cache.STALE_SECONDS
    stale_dir, stale_tmp = tmp_path / ".build-killed", tmp_path / ".tmp-killed.json"
    stale_dir.mkdir()
    (stale_dir / "half.c").write_text("int")
    stale_tmp.write_text("{")
    orphan = tmp_path / f"_fsmooth_{'0' * 24}-{'1' * 16}{cache._ext_suffix()}"
    orphan.write_bytes(b"\x7fELF")
    for path in (stale_dir, stale_tmp, orphan):
        os.utime(path, (old, old))
    live = tmp_path / ".build-running"  # a build in progress in another process
    live.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _loaded_constant(3.5) == 3.5
    assert not stale_dir.exists() and not stale_tmp.exists() and not orphan.exists()
    assert live.exists()


def test_processes_compiling_into_one_empty_cache_build_once(tmp_path):
    import subprocess

    script = textwrap.dedent("""
        import sys
        import numpy as np
        from fsmooth import cache, examples
        print(examples.vector_add(np.ones(3), np.ones(3)).tolist(), cache.build_count)
    """)
    env = dict(os.environ, **{cache.CACHE_DIR_ENV: str(tmp_path / "cache")})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    children = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err
        outputs.append(out.split("]")[-1].strip())
    assert sorted(outputs) == ["0", "0", "1"]


# ----------------------------------------------------------------------------- source

def test_the_source_compiled_is_the_source_imported(tmp_path, monkeypatch):
    text = _scaled_kernels(1, "1.0")
    module = _fresh_module(tmp_path, monkeypatch, "edited_after_import", text)
    (tmp_path / "edited_after_import.py").write_text(text.replace("+ 1.0", "+ 2.0"))
    a = np.arange(3.0)
    np.testing.assert_array_equal(module.scale_0(a), a + 1.0)
    np.testing.assert_array_equal(module.scale_0.reference(a), a + 1.0)


def test_kernel_over_something_that_is_not_a_function_is_a_type_error():
    with pytest.raises(TypeError, match="function defined with def"):
        fs.kernel(len)


# ----------------------------------------------------------------------------- dask

def test_a_dask_cluster_runs_a_kernel_over_chunks(tmp_path, monkeypatch):
    """examples/distributed/reprojection.py on a LocalCluster of two worker processes equals one
    process and the numpy oracle; the workers compile the C once between them."""
    from dask.distributed import Client, LocalCluster

    monkeypatch.syspath_prepend(str(REPO / "examples" / "distributed"))
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    reprojection = importlib.import_module("reprojection")
    cams, points, weights, obs, feats = reprojection.problem(7, 50, 1001)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        out = reprojection.distributed_errors(client, cams, points, weights, obs, feats, chunk=100)
        builds = client.run(lambda: __import__("fsmooth").cache.build_count)
    assert len(builds) == 2 and sum(builds.values()) == 1
    before = cache.build_count
    np.testing.assert_array_equal(out, reprojection.reprojection_errors(cams, points, weights, obs, feats))
    assert cache.build_count == before  # this process found the workers' build too
    np.testing.assert_allclose(out, _reprojection_oracle(cams, points, weights, obs, feats), rtol=1e-12, atol=1e-9)


def _reprojection_oracle(cams, points, weights, obs, feats):
    c = cams[obs[:, 0]]
    xc = np.einsum("nij,nj->ni", c[:, :9].reshape(-1, 3, 3), points[obs[:, 1]]) + c[:, 9:12]
    p = xc[:, :2] / xc[:, 2:3]
    rsq = np.sum(p * p, axis=1, keepdims=True)
    proj = p * c[:, 12:13] * (1.0 + c[:, 13:14] * rsq + c[:, 14:15] * rsq * rsq)
    return weights[:, None] * (proj - feats)
