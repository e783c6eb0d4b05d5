"""Benchmark connected components: ours (GPU union-find) against SciPy in one run.

Cases
-----
* graph: a synthetic graph at the scale of the MICrONS layer 2/3 graph
  (1,272,001 vertices, 6,121,336 edges, 200,000 components; random 64-bit ids),
  and ten times larger. Ours: on-device union-find on compacted ids (CUDA
  events), on-device compaction, and end-to-end from host uint64 arrays to host
  results (transfers included). Peer: ``numpy.unique`` + ``scipy.sparse.csgraph``
  (end-to-end, and the csgraph call alone on compacted ids). The end-to-end
  call copies the ids through pinned memory in chunks and hashes each chunk
  on the device as it lands; its parts are timed alone too (pageable and
  pinned copies, sort and hash compaction, results to pinned and pageable
  host memory), and the whole call with the sort compaction and cold buffers.
* mask: a 512**3 binary mask, ``ivote.components.label`` on the GPU against
  ``scipy.ndimage.label``.
* csv (``--csv``, CPU): reading the 6.1M-edge graph as CSV with the reader of
  ``ivote components``.

Results are checked for exact equality with SciPy before any timing is printed.

    python benchmarks/bench_components.py [--quick] [--csv] [--stage-sweep] [--out benchmarks/results/components.md]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.ndimage as ndi

from ivote._backend import backend_name, default_xp, to_host
from ivote.components import _reference, connected_components, label

MICRONS = dict(n_vertices=1_272_001, n_edges=6_121_336, n_components=200_000)


def synthetic_graph(n_vertices, n_edges, n_components, seed=0):
    """Random graph with exactly ``n_components`` components, every vertex in an edge.

    One giant component and ``n_components - 1`` small ones (2 + geometric
    sizes, mean about 2.7); a random recursive spanning tree in each, the other
    edges at random inside components (some self-loops and duplicates, as in
    synapse lists); random distinct uint64 ids; edges shuffled.
    """
    rng = np.random.default_rng(seed)
    small = 1 + rng.geometric(0.6, size=n_components - 1)
    sizes = np.concatenate([[n_vertices - small.sum()], small]).astype(np.int64)
    assert sizes[0] > 1
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    component_of = np.repeat(np.arange(n_components), sizes)
    vertex = np.arange(n_vertices)
    offset = vertex - starts[component_of]
    child = vertex[offset > 0]
    parent = starts[component_of[child]] + (rng.random(len(child)) * offset[child]).astype(np.int64)
    n_extra = n_edges - len(child)
    a = rng.integers(0, n_vertices, size=n_extra)
    b = starts[component_of[a]] + (rng.random(n_extra) * sizes[component_of[a]]).astype(np.int64)
    index = np.concatenate([np.stack([child, parent], 1), np.stack([a, b], 1)])
    index = index[rng.permutation(len(index))]
    swap = rng.random(len(index)) < 0.5
    index[swap] = index[swap, ::-1]
    while True:
        ids = rng.integers(0, 2**64, size=n_vertices, dtype=np.uint64, endpoint=False)
        if len(np.unique(ids)) == n_vertices:
            break
    return ids[index]


def time_host(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def time_device(xp, fn, repeat):
    """Median milliseconds of ``fn`` on the current stream, by CUDA events."""
    start, stop = xp.cuda.Event(), xp.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        result = fn()
        stop.record()
        stop.synchronize()
        times.append(xp.cuda.get_elapsed_time(start, stop))
    return statistics.median(times), result


def register_copy(xp, edges, expected, repeat):
    """The other way to a pinned copy: page-lock the host array itself (no staging memcpy), copy it
    in one go, unlock it. Returns 'total ms (register / copy / unregister)'."""
    try:
        runtime = xp.cuda.runtime
        out = xp.empty_like(expected)
        parts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            runtime.hostRegister(edges.ctypes.data, edges.nbytes, 0)
            t1 = time.perf_counter()
            out.data.copy_from_host_async(edges.ctypes.data, edges.nbytes)
            xp.cuda.get_current_stream().synchronize()
            t2 = time.perf_counter()
            runtime.hostUnregister(edges.ctypes.data)
            parts.append((time.perf_counter() - t0, t1 - t0, t2 - t1, time.perf_counter() - t2))
        assert bool((out == expected).all())
        total, register, copy, unregister = (1e3 * statistics.median(p[i] for p in parts) for i in range(4))
        return f"{total:.2f} ms ({register:.2f} / {copy:.2f} / {unregister:.2f})"
    except Exception as exc:  # a report row, not a failure of the benchmark
        return f"failed: {type(exc).__name__}: {exc}"


def bench_graph(xp, name, edges, expected_components, repeat, rows):
    from ivote.components import _cuda

    n_edges = len(edges)
    t_peer, peer = time_host(lambda: _reference.connected_components_ref(edges), 1 if n_edges > 2e7 else 2)
    vertex_ids, n_components, component, sizes = peer
    assert n_components == expected_components, (n_components, expected_components)
    index_edges = np.searchsorted(vertex_ids, edges)
    t_csgraph, _ = time_host(lambda: _reference.components_of_index_edges(index_edges, len(vertex_ids)), 1)
    label_ = f"{name}: {len(vertex_ids):,} vertices, {n_edges:,} edges, {n_components:,} components"
    if xp is np:
        rows.append((label_ + ", SciPy only (no GPU)", "-", f"{t_peer * 1e3:.0f} ms", "-"))
        return
    from ivote import _backend

    def check(result):
        assert result.n_components == n_components
        np.testing.assert_array_equal(result.vertex_ids, vertex_ids)
        np.testing.assert_array_equal(result.component, component)
        np.testing.assert_array_equal(result.sizes, sizes)

    t_end = {}
    for compaction in ("sort", "hash"):  # each checked equal to SciPy, then timed
        _cuda.COMPACTION = compaction
        check(connected_components(edges))  # warm-up (compiles, fills the pinned pool) and check
        t_end[compaction], _ = time_host(lambda: connected_components(edges), repeat)
    _cuda.COMPACTION = "auto"
    _backend.free_gpu_memory()  # a first call: pinned and device buffers allocated anew
    t_first, first = time_host(lambda: connected_components(edges), 1)
    check(first)
    del first
    t_h2d, edges_dev = time_device(xp, lambda: xp.asarray(edges), repeat)
    t_staged, staged = time_host(lambda: _backend.to_device_staged(edges, xp), repeat)
    assert bool((staged == edges_dev).all())
    del staged
    t_register = register_copy(xp, edges, edges_dev, repeat)
    t_compact, (ids_dev, index_dev) = time_device(xp, lambda: _cuda.compact_ids_sorted(xp, edges_dev), repeat)
    t_hash, (hash_ids, hash_index) = time_device(xp, lambda: _cuda.compact_ids(xp, edges_dev), repeat)
    assert bool((hash_ids == ids_dev).all()) and bool((hash_index == index_dev).all())
    del hash_ids, hash_index
    n = int(ids_dev.size)
    t_uf, roots = time_device(xp, lambda: _cuda.union_find(xp, index_dev, n), repeat)
    t_canon, (_, component_dev, sizes_dev) = time_device(xp, lambda: _cuda.canonical_from_roots(xp, roots), repeat)
    t_d2h, _ = time_host(lambda: _backend.to_host_pinned([ids_dev, component_dev, sizes_dev], xp), repeat)
    t_d2h_pageable, _ = time_host(lambda: [a.get() for a in (ids_dev, component_dev, sizes_dev)], repeat)
    t_device, _ = time_device(xp, lambda: _cuda.connected_components_gpu(xp, edges_dev), repeat)
    peer_ms = t_peer * 1e3
    rows += [
        (f"{label_}: union-find on compacted ids (device)", f"{t_uf:.2f} ms",
         f"csgraph alone {t_csgraph * 1e3:.0f} ms", f"{t_csgraph * 1e3 / t_uf:.0f}x"),
        (f"{name}: host-to-device copy of uint64 edges, pageable (cupy.asarray)", f"{t_h2d:.2f} ms", "-", "-"),
        (f"{name}: host-to-device copy of uint64 edges, pinned chunks (to_device_staged, "
         f"{_backend.STAGE_THREADS} threads)", f"{t_staged * 1e3:.2f} ms", "-", "-"),
        (f"{name}: host-to-device copy of uint64 edges, the host array page-locked in place "
         "(cudaHostRegister + one copy + unregister)", t_register, "-", "-"),
        (f"{name}: id compaction sort+searchsorted (device)", f"{t_compact:.2f} ms", "-", "-"),
        (f"{name}: id compaction by hash table (device)", f"{t_hash:.2f} ms", "-", "-"),
        (f"{name}: canonical numbering + sizes (device)", f"{t_canon:.2f} ms", "-", "-"),
        (f"{name}: results to host, pinned / pageable", f"{t_d2h * 1e3:.2f} / {t_d2h_pageable * 1e3:.2f} ms",
         "-", "-"),
        (f"{name}: all on device (compact + union-find + numbering)", f"{t_device:.2f} ms",
         f"{peer_ms:.0f} ms", f"{peer_ms / t_device:.0f}x"),
        (f"{name}: end-to-end from host uint64 ids to host results (pinned chunks, hashed as they arrive)",
         f"{t_end['hash'] * 1e3:.1f} ms", f"np.unique+csgraph {peer_ms:.0f} ms", f"{t_peer / t_end['hash']:.0f}x"),
        (f"{name}: same, ids sorted after the copy", f"{t_end['sort'] * 1e3:.1f} ms", f"{peer_ms:.0f} ms",
         f"{t_peer / t_end['sort']:.0f}x"),
        (f"{name}: same, first call after free_gpu_memory (buffers allocated)", f"{t_first * 1e3:.1f} ms",
         f"{peer_ms:.0f} ms", f"{t_peer / t_first:.0f}x"),
    ]
    del edges_dev, ids_dev, index_dev, roots, component_dev, sizes_dev


def stage_sweep(xp, edges, repeat):
    """The pinned, chunked host-to-device copy and the whole call for a few thread counts and chunk
    sizes (the library's defaults restored after)."""
    from ivote import _backend

    defaults = (_backend.STAGE_THREADS, _backend.STAGE_CHUNK_BYTES, _backend.STAGE_SLOTS)
    lines = []
    try:
        for threads in (1, 2, 4, 8, 12):
            for chunk_mib, slots in ((2, 32), (4, 16), (8, 8), (16, 4)):
                _backend.STAGE_THREADS, _backend.STAGE_CHUNK_BYTES, _backend.STAGE_SLOTS = threads, chunk_mib << 20, slots
                _backend.to_device_staged(edges, xp)
                t_copy, _ = time_host(lambda: _backend.to_device_staged(edges, xp), repeat)
                connected_components(edges)
                t_end, _ = time_host(lambda: connected_components(edges), repeat)
                lines.append(f"threads {threads}, chunks {chunk_mib} MiB x {slots}: copy {t_copy * 1e3:.2f} ms, "
                             f"end to end {t_end * 1e3:.2f} ms")
                print(lines[-1], file=sys.stderr, flush=True)
    finally:
        _backend.STAGE_THREADS, _backend.STAGE_CHUNK_BYTES, _backend.STAGE_SLOTS = defaults
    return lines


def bench_mask(xp, size, repeat, rows):
    rng = np.random.default_rng(1)
    coarse = rng.random((size // 8,) * 3) < 0.3
    mask = np.repeat(np.repeat(np.repeat(coarse, 8, 0), 8, 1), 8, 2)
    mask ^= rng.random(mask.shape, dtype=np.float32) < 0.02  # speckle: many small components
    structure = ndi.generate_binary_structure(3, 1)
    t_peer, (expected, expected_count) = time_host(lambda: ndi.label(mask, structure), 1)
    case = f"mask {size}^3 ({mask.mean():.0%} foreground, {expected_count:,} components), connectivity 1"
    if xp is np:
        rows.append((case + ", SciPy only", "-", f"{t_peer * 1e3:.0f} ms", "-"))
        return
    mask_dev = xp.asarray(mask)
    ours = label(mask_dev)  # warm-up and check
    assert ours.count == expected_count
    np.testing.assert_array_equal(to_host(ours.labels), expected)
    del ours
    t_dev, _ = time_device(xp, lambda: label(mask_dev), repeat)
    t_end, _ = time_host(lambda: label(mask), max(1, repeat // 2))
    rows += [
        (f"{case}: on device", f"{t_dev:.1f} ms", f"scipy.ndimage.label {t_peer * 1e3:.0f} ms",
         f"{t_peer * 1e3 / t_dev:.0f}x"),
        (f"{case}: from host mask to host labels", f"{t_end * 1e3:.0f} ms", f"{t_peer * 1e3:.0f} ms",
         f"{t_peer / t_end:.1f}x"),
    ]


def bench_csv(edges, rows):
    from ivote.components._cli import read_edges_csv

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "edges.csv"
        with path.open("w") as stream:
            stream.write("pre,post\n")
            for start in range(0, len(edges), 1 << 20):
                chunk = edges[start:start + (1 << 20)].tolist()
                stream.write("".join(f"{a},{b}\n" for a, b in chunk))
        size_mb = path.stat().st_size / 1e6
        t_read, read = time_host(lambda: read_edges_csv(path, "pre,post"), 2)
        np.testing.assert_array_equal(read, edges)
    rows.append((f"CSV {len(edges):,} edges ({size_mb:.0f} MB), ivote components reader (CPU)",
                 f"{t_read:.2f} s", "-", "-"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="MICrONS scale only, smaller mask (256^3)")
    parser.add_argument("--no-10x", action="store_true", help="skip the graph ten times larger")
    parser.add_argument("--csv", action="store_true", help="also time reading the graph from CSV (CPU)")
    parser.add_argument("--no-gpu", action="store_true", help="SciPy side only")
    parser.add_argument("--stage-sweep", action="store_true",
                        help="also time the pinned chunked copy for a few thread counts and chunk sizes (1x graph)")
    parser.add_argument("--mask-size", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=None, help="write the table as Markdown here")
    args = parser.parse_args(argv)
    xp = np if args.no_gpu else default_xp()
    device = backend_name(xp)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows: list[tuple[str, str, str, str]] = []
    t0 = time.perf_counter()
    edges = synthetic_graph(**MICRONS)
    print(f"generated the MICrONS-scale graph in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if args.csv:
        bench_csv(edges, rows)
    bench_graph(xp, "1x", edges, MICRONS["n_components"], args.repeat, rows)
    sweep = stage_sweep(xp, edges, args.repeat) if args.stage_sweep and xp is not np else []
    del edges
    if not (args.quick or args.no_10x):
        big = {key: 10 * value for key, value in MICRONS.items()}
        edges = synthetic_graph(**big, seed=1)
        bench_graph(xp, "10x", edges, big["n_components"], args.repeat, rows)
        del edges
    bench_mask(xp, 256 if args.quick else args.mask_size, args.repeat, rows)

    lines = [
        f"Connected components benchmark, {date}, device: {device}",
        "",
        "| case | ours | peer | ratio (peer/ours) |",
        "|---|---|---|---|",
    ] + [f"| {case} | {ours} | {peer} | {ratio} |" for case, ours, peer, ratio in rows]
    if sweep:
        lines += ["", "Pinned chunked copy of the 1x graph's edges (median of the repeats):", ""]
        lines += [f"- {line}" for line in sweep]
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
