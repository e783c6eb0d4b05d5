"""One CD-1 step of a convolutional RBM: frequency domain (ours) vs cuDNN (PyTorch) vs our NumPy path.

The thesis' settings (Brosch 2016, ch. 1): 3D first layer on 128^3 volumes with
32 filters of 5^3, 9^3 and 13^3 at strides 1, 2 and 4; 2D 512^2 images with 32
filters. Times are per image of a mini-batch of 8, including the parameter
update (and, for ours, the once-per-mini-batch filter FFTs and crop). The
cuDNN peer runs the same CD-1 step (conv -> noisy ReLU -> transposed conv ->
conv -> two weight gradients) with ``torch.nn.functional.conv{2,3}d`` on the
same GPU, both one image at a time and as one batch of 8; the faster of the two
is the peer. PyTorch is imported only here.

Each case names the hidden extent of training (``ConvRBM(hidden_extent=...)``):
``valid`` (the default and the thesis' formulation: FFTs at the image's size;
the peer uses ``padding=0``) or ``same`` (zero boundary, a hidden unit per
pixel; FFTs padded by half a filter; the peer uses ``padding=k//2``).

``--cpu-tile SIDE`` (no GPU needed) times instead the recommended model
(``ivote.features.NucleusFeatures``: 8 filters of 9x9 for a voting radius of 18
px, 10 epochs on 36x36 tiles) fitted on one SIDE x SIDE H&E tile (gbm40 tiles
mirrored to size when the evaluation data are there, else synthetic nuclei),
on the CPU: the Numba path, the same path with every spectral product threaded
(the code before 2026-11-24), and the NumPy reference, each with its wall and
CPU time; the peer is the detection of the same tile (``iterative_voting``,
Numba, default blur).

Usage::

    python benchmarks/bench_convrbm.py [--quick] [--breakdown] [--case 128x128x128:9:1[:same] ...] [--no-torch]
        [--no-numpy] [--out FILE]
    python benchmarks/bench_convrbm.py --cpu-tile 1000
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ivote._backend import backend_name, cupy_available, default_xp, free_gpu_memory  # noqa: E402
from ivote.features import ConvRBM  # noqa: E402

BATCH = 8


def cases(quick):
    """The headline cases first, so that a run cut short still reports them: (shape, k, stride, extent)."""
    first = [((128,) * 3, 9, 1, "valid"), ((128,) * 3, 9, 1, "same"), ((128,) * 3, 9, 2, "valid"),
             ((128,) * 3, 9, 4, "valid"), ((128,) * 3, 5, 1, "valid"), ((128,) * 3, 13, 1, "valid"),
             ((512, 512), 9, 1, "valid")]
    if quick:
        return first
    rest = ([((128,) * 3, k, s, "valid") for k in (5, 13) for s in (2, 4)]
            + [((512, 512), 9, s, "valid") for s in (2, 4)])
    return first + rest


def make_batch(shape, xp, n=BATCH):
    rng = np.random.default_rng(0)
    return [xp.asarray(rng.standard_normal(shape, dtype=np.float32)) for _ in range(n)]


def our_step(model, batch, lr=1e-3):
    grad_w, grad_c, grad_b, _, _ = model._batch_gradient(batch)
    model.filters_ += lr * grad_w
    model.hidden_bias_ += lr * grad_c
    model.visible_bias_ += lr * grad_b


def time_gpu(fn, xp, repeat, inner=1):
    """Median over ``repeat`` of the time of ``inner`` back-to-back calls, per call (seconds)."""
    fn()  # warm-up: kernel compilation, FFT plans
    xp.cuda.get_current_stream().synchronize()
    start, stop = xp.cuda.Event(), xp.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        for _ in range(inner):
            fn()
        stop.record()
        stop.synchronize()
        times.append(xp.cuda.get_elapsed_time(start, stop) / 1e3 / inner)
    return float(np.median(times))


def ours(shape, k, s, extent, xp, repeat):
    model = ConvRBM(32, k, stride=s, xp=xp, hidden_extent=extent)
    model._initialise(len(shape))
    batch = make_batch(shape, xp)
    model._geometry(shape)  # picks (times) the FFT shape once, before memory is measured
    xp.fft.config.get_plan_cache().clear()  # plans of earlier cases would count as memory
    free_gpu_memory()
    pool = xp.get_default_memory_pool()
    pool.free_all_blocks()
    our_step(model, batch)
    xp.cuda.get_current_stream().synchronize()
    held = pool.total_bytes() - sum(b.nbytes for b in batch) - 2 * model.filters_.nbytes
    seconds = time_gpu(lambda: our_step(model, batch), xp, repeat)
    return seconds / BATCH, held, model.memory_estimate(shape)


def breakdown(xp, shape=(128, 128, 128), k=9, s=1, extent="valid", repeat=5):
    """Time the parts of one CD-1 step (per call, and how often a step makes the call)."""
    from ivote.features._spectral import (accumulate_gradient, hidden_spectrum, irfftn, noisy_relu, rfftn,
                                          visible_spectrum)

    model = ConvRBM(32, k, stride=s, xp=xp, hidden_extent=extent)
    model._initialise(len(shape))
    g = model._geometry(shape)
    filters = model._filter_spectra(g)
    visible = model._visible_blocks(make_batch(shape, xp, n=1)[0], g)
    v_spec = rfftn(visible, g.fft_shape, xp)
    h_spec = hidden_spectrum(filters, v_spec, xp)
    maps = xp.zeros((32,) + g.fft_shape, dtype=np.float32)
    gradient = xp.zeros_like(filters)
    parts = [
        ("rfftn, 32 maps", 2, lambda: rfftn(maps, g.fft_shape, xp)),
        ("irfftn, 32 maps (unnormalised)", 2,
         lambda: irfftn(h_spec.copy(), g.fft_shape, xp, overwrite=True, normalise=False)),
        ("(copy of 32 spectra, subtract)", -2, lambda: h_spec.copy()),
        ("hidden_spectrum kernel", 2, lambda: hidden_spectrum(filters, v_spec, xp)),
        ("visible_spectrum kernel", 1, lambda: visible_spectrum(filters, h_spec, xp)),
        ("accumulate_gradient kernel", 1, lambda: accumulate_gradient(gradient, h_spec, v_spec, h_spec, v_spec, xp)),
        ("noisy_relu kernel (hashed noise)", 1, lambda: noisy_relu(maps, model.hidden_bias_, g.hidden, 7, xp)),
        ("noisy_relu kernel (mean)", 1, lambda: noisy_relu(maps, model.hidden_bias_, g.hidden, None, xp)),
        ("filter spectra (per mini-batch)", 0, lambda: model._filter_spectra(g)),
        ("filter gradient crop (per mini-batch)", 0, lambda: model._filter_gradient(gradient.copy(), g)),
        ("one CD-1 step (_cd1, one image)", 0, lambda: model._cd1(visible, g, filters, gradient, 7)),
    ]
    print(f"\nbreakdown {'x'.join(map(str, shape))} k{k} s{s} {extent}, FFT shape {g.fft_shape}:")
    for name, calls, fn in parts:
        ms = time_gpu(fn, xp, repeat, inner=10) * 1e3  # 10 calls per event pair: launch overhead amortised
        print(f"  {name:36s} {ms:7.3f} ms" + (f" x {calls}" if calls else ""), flush=True)


def ours_numpy(shape, k, s, extent):
    model = ConvRBM(32, k, stride=s, xp=np, hidden_extent=extent)
    model._initialise(len(shape))
    batch = make_batch(shape, np, n=1)
    start = time.perf_counter()
    our_step(model, batch)
    return time.perf_counter() - start


def torch_step_fn(torch, shape, k, s, batched, extent="valid"):
    import torch.nn.functional as F
    from torch.nn.grad import conv2d_weight, conv3d_weight

    ndim = len(shape)
    conv, deconv, weight_grad = (F.conv3d, F.conv_transpose3d, conv3d_weight) if ndim == 3 else (
        F.conv2d, F.conv_transpose2d, conv2d_weight)
    dev = "cuda"
    w = torch.randn((32, 1) + (k,) * ndim, device=dev) * 0.01
    c = torch.zeros(32, device=dev)
    b = torch.zeros(1, device=dev)
    images = torch.randn((BATCH, 1) + tuple(shape), device=dev)
    pad = k // 2 if extent == "same" else 0
    hidden = [(n + 2 * pad - k) // s + 1 for n in shape]
    out_pad = [n - ((h - 1) * s - 2 * pad + k) for n, h in zip(shape, hidden)]
    dims = tuple(range(2, 2 + ndim))
    state = {"w": w, "c": c, "b": b}

    def cd1(v0):
        w, c, b = state["w"], state["c"], state["b"]
        mu0 = conv(v0, w, c, stride=s, padding=pad)
        h0 = torch.relu(mu0 + torch.sqrt(torch.sigmoid(mu0)) * torch.randn_like(mu0))
        v1 = deconv(h0, w, stride=s, padding=pad, output_padding=out_pad) + b
        h1 = torch.relu(conv(v1, w, c, stride=s, padding=pad))
        dw = weight_grad(v0, w.shape, h0, stride=s, padding=pad) - weight_grad(v1, w.shape, h1, stride=s, padding=pad)
        return dw, (h0 - h1).sum(dim=(0,) + dims), (v0 - v1).sum()

    def step():
        with torch.no_grad():
            if batched:
                dw, dc, db = cd1(images)
            else:
                dw, dc, db = 0, 0, 0
                for i in range(BATCH):
                    a, bb, cc = cd1(images[i : i + 1])
                    dw, dc, db = dw + a, dc + bb, db + cc
            state["w"] = state["w"] + 1e-3 * dw
            state["c"] = state["c"] + 1e-3 * dc
            state["b"] = state["b"] + 1e-3 * db

    return step


def cudnn(shape, k, s, extent, repeat, tf32=True):
    import torch

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    results = {}
    for batched in (False, True):
        try:
            step = torch_step_fn(torch, shape, k, s, batched, extent)
            step()
            step()  # cudnn.benchmark autotunes on the first calls
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for _ in range(repeat):
                start.record()
                step()
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop) / 1e3)
            results[batched] = (float(np.median(times)) / BATCH, torch.cuda.max_memory_allocated())
        except RuntimeError as exc:  # out of memory or unsupported: report, do not crash
            results[batched] = (math.nan, str(exc).splitlines()[0][:60])
        torch.cuda.empty_cache()
    return results


def he_tile(side):
    """A side x side RGB H&E tile: gbm40 tiles side by side (mirrored), else synthetic dark nuclei."""
    import os

    data = Path(os.environ.get("IVOTE_EVAL_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")) / "gbm40"
    if not data.exists():
        data = Path("/work/shared/data/gbm40")
    if data.exists():
        import tifffile

        tiles = [tifffile.imread(p) for p in sorted((data / "images").glob("*.tif"))[:4]]
        row = lambda a, b: np.concatenate([a, b[:, ::-1]], axis=1)  # noqa: E731
        mosaic = np.concatenate([row(tiles[0], tiles[1]), row(tiles[2], tiles[3])[::-1]], axis=0)
        reps = -(-side // mosaic.shape[0])
        return np.tile(mosaic, (reps, reps, 1))[:side, :side], "gbm40 tiles"
    from ivote.data import synthetic_nuclei

    grey = synthetic_nuclei((side, side), radius=12, seed=0, polarity="dark").image
    grey = (grey - grey.min()) / np.ptp(grey)
    rgb = np.stack([0.25 + 0.75 * grey, 0.1 + 0.9 * grey, 0.6 + 0.4 * grey], axis=-1)
    return (rgb * 255).astype(np.uint8), "synthetic"


def cpu_tile(side, radius=18.0):
    """Seconds (wall, CPU) to fit the recommended model on a side x side H&E tile, per CPU path."""
    import os

    from ivote.detect import iterative_voting
    from ivote.features import NucleusFeatures
    from ivote.features import _numba as numba_products

    tile, source = he_tile(side)
    NucleusFeatures(radius).fit(tile[:96, :96])  # compile / load the Numba kernels first
    iterative_voting(tile[:96, :96], radius=radius, backend="numba")
    rows = []
    threshold = numba_products._PARALLEL_MIN_WORK
    for name, backend, min_work in (("Numba (one-thread small products)", "numba", threshold),
                                    ("Numba, every product threaded (before)", "numba", 0),
                                    ("NumPy reference", "numpy", threshold)):
        os.environ["IVOTE_BACKEND"] = backend
        numba_products._PARALLEL_MIN_WORK = min_work
        wall, cpu = time.perf_counter(), time.process_time()
        model = NucleusFeatures(radius).fit(tile)
        rows.append((name, time.perf_counter() - wall, time.process_time() - cpu, model))
    numba_products._PARALLEL_MIN_WORK = threshold
    os.environ["IVOTE_BACKEND"] = "numba"
    wall, cpu = time.perf_counter(), time.process_time()
    found = iterative_voting(tile, radius=radius, backend="numba")
    detect = (time.perf_counter() - wall, time.process_time() - cpu)
    model = rows[0][3]
    print(f"# ConvRBM training on the CPU, {side}x{side} H&E ({source}), "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC\n")
    print(f"NucleusFeatures({radius:g}): {model.n_filters} filters {'x'.join(map(str, model.filter_shape))}, "
          f"{len(model.reconstruction_errors_)} epochs; {os.cpu_count()} CPU(s), shared (timings noisy).\n")
    print("| path | wall s | CPU s | / detection (wall) |\n| --- | --- | --- | --- |")
    for name, wall_s, cpu_s, _ in rows:
        print(f"| fit, {name} | {wall_s:.1f} | {cpu_s:.1f} | {wall_s / detect[0]:.1f}x |")
    print(f"| peer: iterative_voting, Numba, default blur ({len(found.points)} nuclei) | {detect[0]:.1f} "
          f"| {detect[1]:.1f} | 1x |")
    return 0


def fmt_ms(seconds):
    return "n/a" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.2f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases (9^3 at strides 1/2/4, 5^3, 13^3, 2D)")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-numpy", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=None, help="also write the table as Markdown to this file")
    parser.add_argument("--breakdown", action="store_true", help="first time the parts of the 9^3 step")
    parser.add_argument("--breakdown-extent", default="valid", choices=("valid", "same"))
    parser.add_argument("--case", action="append", default=None, metavar="SHAPE:K:S[:EXTENT]",
                        help="run only this case, e.g. 128x128x128:9:1 or 128x128x128:9:1:same (repeatable)")
    parser.add_argument("--cpu-tile", type=int, default=None, metavar="SIDE",
                        help="time instead the recommended model's training on a SIDE x SIDE H&E tile on the CPU")
    args = parser.parse_args(argv)
    if args.cpu_tile:
        return cpu_tile(args.cpu_tile)
    if not cupy_available():
        print("bench_convrbm: needs a CUDA GPU with CuPy")
        return 1
    xp = default_xp()
    if args.breakdown:
        breakdown(xp, extent=args.breakdown_extent)
    lines = [
        f"# ConvRBM CD-1 step: frequency domain vs cuDNN\n",
        f"device: {backend_name(xp)}; date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
        f"32 filters, float32, mini-batch of {BATCH}, time per image (median of {args.repeat}).",
    ]
    try:
        import torch

        lines.append(f"peer: PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
                     "TF32 allowed (PyTorch default), cudnn.benchmark=True; best of 1-image loop and batch of 8.")
    except ImportError:
        args.no_torch = True
    lines += [
        "",
        "| case | extent | FFT shape | ours ms | cuDNN ms (loop / batch) | cuDNN / ours | NumPy ms | NumPy / ours "
        "| memory MiB measured | eq. 1.14-style MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    rows = []
    selected = cases(args.quick)
    if args.case:
        selected = []
        for text in args.case:
            shape, k, s, *extent = text.split(":")
            selected.append((tuple(int(n) for n in shape.split("x")), int(k), int(s), extent[0] if extent else "valid"))
    for shape, k, s, extent in selected:
        name = f"{'x'.join(map(str, shape))} k{k} s{s}"
        ours_s, held, estimate = ours(shape, k, s, extent, xp, args.repeat)
        free_gpu_memory()
        peer = ratio = None
        peer_text = "n/a"
        if not args.no_torch:
            res = cudnn(shape, k, s, extent, args.repeat)
            loop, batched = res[False][0], res[True][0]
            finite = [t for t in (loop, batched) if math.isfinite(t)]
            peer = min(finite) if finite else None
            ratio = peer / ours_s if peer else None
            peer_text = f"{fmt_ms(loop)} / {fmt_ms(batched)}"
        numpy_s = None
        if not args.no_numpy and (s == 1 or len(shape) == 2) and k == 9:
            numpy_s = ours_numpy(shape, k, s, extent)
        row = (f"| {name} | {extent} | {'x'.join(map(str, estimate['fft_shape']))} c{estimate['channels']} | {fmt_ms(ours_s)} "
               f"| {peer_text} | {'n/a' if ratio is None else f'{ratio:.1f}x'} | {fmt_ms(numpy_s)} "
               f"| {'n/a' if numpy_s is None else f'{numpy_s / ours_s:.0f}x'} | {held / 2**20:.0f} "
               f"| {estimate['total'] / 2**20:.0f} |")
        print(row, flush=True)
        rows.append(row)
        free_gpu_memory()
    if args.out:
        Path(args.out).write_text("\n".join(lines + rows) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
