"""``ivote features fit`` and ``ivote features apply``: learn a ConvRBM, write its feature maps."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ._grayscale import as_grayscale

__all__ = ["demo", "register"]


def _parse_size(text: str, option: str = "--size") -> int | tuple[int, ...]:
    parts = [p for p in str(text).replace("x", ",").split(",") if p.strip()]
    try:
        sizes = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(f"{option} must be an integer or Z,Y,X integers; got {text!r}") from None
    if not sizes or any(s < 1 for s in sizes) or len(sizes) not in (1, 2, 3):
        raise ValueError(f"{option} must be an integer >= 1 or 2-3 comma-separated integers; got {text!r}")
    return sizes[0] if len(sizes) == 1 else sizes


def _read(path, args=None):
    from .._files import read_for_detection

    options = {k: getattr(args, k, None) for k in ("axes", "channel", "scene")}
    if str(options["scene"]).lower() == "all":
        raise ValueError("--scene all is for 'ivote detect' and 'ivote segment'; give features one scene (index or name)")
    image, found = read_for_detection(path, **options)
    if "T" in found.axes:
        raise ValueError(f"{found.path}: a time-lapse ({found.axes}); features are learnt on 2D or 3D images: "
                         f"give one frame, or name the axes with --axes")
    try:
        spacing = found.known_spacing()
    except ValueError:
        spacing = None
    return as_grayscale(image, rgb=found.is_rgb), spacing


def _write_tiff(path, array, spacing, ndim):
    import tifffile

    from ..io import write_atomic

    spatial_axes = "ZYX"[-ndim:]
    axes = ("C" if array.ndim > len(spatial_axes) else "") + spatial_axes
    metadata = {"axes": axes}
    if spacing is not None:
        metadata["spacing"] = list(spacing)

    def write(tmp: Path) -> None:
        tifffile.imwrite(tmp, np.ascontiguousarray(array, dtype=np.float32), photometric="minisblack",
                         metadata=metadata)

    path = Path(path)
    if path.suffix.lower() not in (".tif", ".tiff"):
        raise ValueError(f"--out must end in .tif or .tiff; got {path.name!r}")
    return write_atomic(path, write)


def _cmd_fit(args) -> int:
    from .._backend import backend_name, default_xp
    from .._progress import cli_progress
    from ..io import check_output_path
    from ._convrbm import ConvRBM

    with cli_progress(args.quiet) as progress, progress.step("reading the images", total=len(args.inputs)) as task:
        images = []
        for path in args.inputs:
            images.append(_read(path, args)[0])
            task.update(len(images))
    ndims = {image.ndim for image in images}
    if len(ndims) != 1:
        raise ValueError(f"all INPUT images must have the same number of axes; got {sorted(ndims)}")
    out = check_output_path(args.out, (".npz",), inputs=args.inputs)
    patch = _parse_size(args.patch, "--patch") if args.patch is not None else None
    ndim = ndims.pop()
    if isinstance(patch, int):
        patch = (patch,) * ndim
    filters, size = args.filters, _parse_size(args.size) if args.size is not None else None
    if args.radius is not None:  # the recommended model for nuclei of this voting radius (docs/features.md)
        from ._learn import N_FILTERS, nucleus_filter_shape

        if args.radius <= 0:
            raise ValueError(f"--radius must be > 0 (the voting radius in pixels); got {args.radius:g}")
        filters = N_FILTERS if filters is None else filters
        size = nucleus_filter_shape(args.radius, (1.0,) * ndim) if size is None else size
        if patch is None:
            from ._learn import default_patch_shape

            patch = default_patch_shape(images[0].shape, max(size) if isinstance(size, tuple) else size, args.stride)
    if filters is None or size is None:
        raise ValueError("give --filters and --size, or --radius R (the voting radius in pixels) for the "
                         "recommended model")
    model = ConvRBM(filters, size, stride=args.stride, seed=args.seed, hidden_extent=args.hidden_extent)
    start = time.perf_counter()

    with cli_progress(args.quiet) as progress, progress.step("training (epochs)", total=args.epochs) as task:

        def report(epoch, n_epochs, error):
            task.update(epoch, n_epochs)
            if not args.quiet:
                print(f"epoch {epoch}/{n_epochs}: reconstruction error {error:.4f}", flush=True)

        model.fit(images, epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate,
                  momentum=args.momentum, weight_decay=args.weight_decay, patch_shape=patch, progress=report)
    from ..io import write_atomic

    write_atomic(out, model.save)
    print(f"{model.n_filters} filters {'x'.join(map(str, model.filter_shape))}, stride {model.stride}, "
          f"{len(images)} image(s), {time.perf_counter() - start:.1f} s on {backend_name(default_xp())} -> {out}")
    return 0


def _cmd_apply(args) -> int:
    from .._backend import to_host
    from .._progress import cli_progress
    from ..io import check_output_path
    from ._convrbm import ConvRBM

    check_output_path(args.out, (".tif", ".tiff"), inputs=(args.input, args.model))
    with cli_progress(args.quiet) as progress:
        with progress.step("reading the image"):
            image, spacing = _read(args.input, args)
        model = ConvRBM.load(args.model)
        if image.ndim != model.ndim:
            raise ValueError(f"INPUT is {image.ndim}D but the model's filters are {model.ndim}D")
        with progress.step("computing the feature maps"):
            if args.detection_input:
                result = to_host(model.detection_input(image))
            else:
                result = to_host(model.transform(image))
        if not np.isfinite(result).all():  # never written as if it were a result
            from ..errors import IvoteError

            raise IvoteError(f"the feature maps of {args.input} with {args.model} hold NaN or infinite values; "
                             "check that the image is finite and the model was trained on similar images")
        with progress.step("writing the feature maps"):
            _write_tiff(args.out, result, spacing if spacing is None or len(spacing) == image.ndim else None,
                        image.ndim)
    print(f"{'detection input' if args.detection_input else f'{model.n_filters} feature maps'} "
          f"{'x'.join(map(str, result.shape))} -> {args.out}")
    return 0


def register(subparsers) -> None:
    from .._files import add_input_options

    features = subparsers.add_parser(
        "features", help="learn convolutional RBM features; write feature maps",
        description="Learn a convolutional restricted Boltzmann machine's filters from images of nuclei (fit) "
                    "and write its feature maps, or the map that 'ivote detect --features' votes on (apply).")
    sub = features.add_subparsers(dest="features_command", required=True, metavar="ACTION")

    fit = sub.add_parser("fit", help="train a convolutional RBM on one or more images",
                         description="Train a convolutional RBM (in the frequency domain, GPU when available) on "
                                     "one or more 2D or 3D images; write its filters to an .npz model.")
    fit.add_argument("inputs", nargs="+", metavar="INPUT", help="2D or 3D images (TIFF/PNG; RGB becomes gray)")
    fit.add_argument("--radius", type=float, default=None,
                     help="voting radius in pixels (as 'ivote detect --radius'): the recommended model for nuclei "
                          "of that size, 8 filters about half the radius wide, tiles 4 filters wide")
    fit.add_argument("--filters", type=int, default=None, help="number of filters (hidden maps; default with --radius: 8)")
    fit.add_argument("--size", default=None, help="filter size in pixels: S, or Z,Y,X (default with --radius: "
                                                  "half the radius, odd)")
    fit.add_argument("--stride", type=int, default=1, choices=(1, 2, 4), help="hidden-unit stride (default 1)")
    fit.add_argument("--epochs", type=int, default=10, help="passes over the data (default 10)")
    fit.add_argument("--batch-size", type=int, default=8, help="images or patches per mini-batch (default 8)")
    fit.add_argument("--learning-rate", type=float, default=1e-3, help="step size of the contrastive-divergence updates (default 1e-3)")
    fit.add_argument("--momentum", type=float, default=0.5, help="momentum of the updates (default 0.5)")
    fit.add_argument("--weight-decay", type=float, default=1e-4, help="L2 weight decay of the filters (default 1e-4)")
    fit.add_argument("--hidden-extent", default="valid", choices=("valid", "same"),
                     help="hidden units in training: where the filter fits inside the image (valid, default: FFTs at "
                          "the image's size) or on every pixel with a zero boundary (same)")
    fit.add_argument("--patch", default=None, help="train on tiles of this size (S or Z,Y,X) instead of whole images")
    add_input_options(fit)
    fit.add_argument("--seed", type=int, default=0, help="random seed of the initial filters and sampling (default 0)")
    fit.add_argument("--quiet", action="store_true", help="do not print the error of each epoch, nor a progress bar")
    fit.add_argument("--out", required=True, help="model file (.npz)")
    fit.set_defaults(func=_cmd_fit)

    apply = sub.add_parser("apply", help="write the hidden feature maps of an image as a float32 TIFF",
                           description="Apply a trained model to an image: write its hidden feature maps (one "
                                       "per filter) or the single detection-input map, as a float32 TIFF.")
    apply.add_argument("input", metavar="INPUT", help="2D or 3D image (TIFF/PNG) with the model's number of axes")
    add_input_options(apply)
    apply.add_argument("--model", required=True, help="model file written by 'ivote features fit'")
    apply.add_argument("--out", required=True, help="output TIFF: (n_filters, *image shape) float32")
    apply.add_argument("--detection-input", action="store_true",
                       help="write the single-channel map used by 'ivote detect --features' instead")
    apply.set_defaults(func=_cmd_apply)


def demo(sample_2d, sample_3d, out_dir) -> list[str]:
    """Learn 8 filters of 7x7 on the 2D sample; write the model and its detection input."""
    from .._backend import to_host
    from ._convrbm import ConvRBM

    start = time.perf_counter()
    model = ConvRBM(8, 7, stride=1, seed=0)
    model.fit(sample_2d.image, epochs=5, patch_shape=(64, 64))
    out_dir = Path(out_dir)
    model.save(out_dir / "features_2d.npz")
    _write_tiff(out_dir / "features_2d_detection_input.tif", to_host(model.detection_input(sample_2d.image)),
                sample_2d.spacing, 2)
    errors = model.reconstruction_errors_
    return [
        f"features: ConvRBM 8 filters 7x7 on sample_2d, reconstruction error {errors[0]:.3f} -> {errors[-1]:.3f} "
        f"in {time.perf_counter() - start:.1f} s -> features_2d.npz, features_2d_detection_input.tif"
    ]
