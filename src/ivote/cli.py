"""Command line: ``ivote demo``, ``ivote info`` and one subcommand per pipeline stage.

Each stage keeps its own command in ``ivote/<stage>/_cli.py``, which defines

* ``register(subparsers)``: adds its subcommand(s), each with ``func=handler``;
* optionally ``demo(sample_2d, sample_3d, out_dir) -> list[str]``: runs the stage
  on the demo's synthetic samples, writes its outputs under ``out_dir`` and
  returns summary lines.

Every failure becomes one line on stderr and exit status 2 (see docs/reliability.md).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import warnings
from pathlib import Path

# Stages with a command line, in pipeline order. Only stages that exist are listed.
STAGE_CLIS: tuple[str, ...] = (
    "ivote.features._cli",
    "ivote.detect._cli",
    "ivote.learn._cli",
    "ivote.segment._cli",
    "ivote.components._cli",
    "ivote.measure._cli",
    "ivote.export._cli",
)


# Demo sample shapes on NumPy, where the full ones take minutes.
_SMALL_2D = (256, 256)
_SMALL_3D = (24, 96, 96)


class UsageError(Exception):
    """Bad input from the command line: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its errors as one line with where to find the usage (exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _stage_modules():
    return [importlib.import_module(name) for name in STAGE_CLIS]


def _cmd_info(args) -> int:
    from . import __version__
    from ._backend import backend_name, cpu_threads, default_xp, use_numba
    from ._selftest import kernel_selftest

    xp = default_xp()
    print(f"napari-ivote {__version__}")
    print(f"backend: {backend_name(xp)}")
    if xp.__name__ == "numpy":
        print(f"CPU threads: {cpu_threads()}" + (" (Numba; NUMBA_NUM_THREADS sets them)" if use_numba(xp) else ""))
    if xp.__name__ == "cupy":
        print(f"kernel self-test: {kernel_selftest()}")
    return 0


def _cmd_demo(args) -> int:
    import numpy as np
    import tifffile

    from ._backend import backend_name, default_xp
    from .data import sample_2d, sample_3d

    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    xp = default_xp()
    print(f"napari-ivote demo: writing to {out_dir}")
    print(f"backend: {backend_name(xp)}")
    t0 = time.perf_counter()
    full = args.size == "full" or (args.size == "auto" and xp is not np)
    if full:
        s2, s3 = sample_2d(), sample_3d()
    else:
        print("  (CPU: smaller samples, so the demo takes well under a minute; --size full for the GPU sizes)")
        s2, s3 = sample_2d(_SMALL_2D), sample_3d(_SMALL_3D)
    for name, s in (("sample_2d", s2), ("sample_3d", s3)):
        tifffile.imwrite(out_dir / f"{name}.tif", s.image, photometric="minisblack", metadata={"spacing": list(s.spacing)})
        tifffile.imwrite(out_dir / f"{name}_labels.tif", s.labels.astype(np.uint16), photometric="minisblack")
        header = ",".join("zyx"[-s.image.ndim:])
        np.savetxt(out_dir / f"{name}_centers.csv", s.centers, delimiter=",", header=header, comments="", fmt="%.3f")
        print(
            f"  {name}: {'x'.join(map(str, s.image.shape))} pixels, spacing {s.spacing} um, "
            f"{len(s.centers)} true nuclei -> {name}.tif, {name}_labels.tif, {name}_centers.csv"
        )
    from .napari._demo_tool import start_screenshot_demo  # imports no napari; runs it in a subprocess

    # napari starts in its own process (seconds of imports) while the stages run here
    with start_screenshot_demo(s2, out_dir) as screenshot:  # a stage that raises stops it
        for module in _stage_modules():
            demo = getattr(module, "demo", None)
            if demo is not None:
                for line in demo(s2, s3, out_dir):
                    print(f"  {line}")
        for line in screenshot.result():
            print(f"  {line}")
    print(f"done in {time.perf_counter() - t0:.1f} s; outputs in {out_dir}")
    return 0


def _leaf_parsers(parser: argparse.ArgumentParser):
    """Every (sub)command parser that runs something (has no subcommands of its own)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
    for action in subs:
        for child in dict.fromkeys(action.choices.values()):
            yield from _leaf_parsers(child)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(
        prog="ivote",
        description="Find, outline, count and measure nuclei in 2D images and 3D volumes: GPU iterative voting "
                    "and level sets, with a CPU path that gives the same answer.",
        epilog="'ivote COMMAND --help' describes each command. Progress goes to stderr when it is a terminal.",
    )
    parser.add_argument("--version", action="version", version=f"napari-ivote {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the pipeline on built-in synthetic samples",
                          description="Detect, segment and measure nuclei in built-in synthetic 2D and 3D samples "
                                      "with known truth; write every output and print the accuracy.")
    demo.add_argument("--out", default="ivote-demo", help="output folder (default: ./ivote-demo)")
    demo.add_argument(
        "--size", choices=("auto", "small", "full"), default="auto",
        help="sample sizes: full (512², 48x160x160) on a GPU, small (256², 24x96x96) on NumPy (default: auto)",
    )
    demo.set_defaults(func=_cmd_demo)
    info = sub.add_parser("info", help="print the version and the backend (GPU or NumPy); self-test GPU kernels",
                          description="Print the version and the array backend that will run (the GPU's name, "
                                      "or the CPU path); on a GPU, self-test a kernel against NumPy.")
    info.set_defaults(func=_cmd_info)
    for module in _stage_modules():
        module.register(sub)
    for leaf in _leaf_parsers(parser):
        if not any("--quiet" in action.option_strings for action in leaf._actions):
            leaf.add_argument("-q", "--quiet", action="store_true",
                              help="no progress bar on stderr (it is shown only when stderr is a terminal)")
    return parser


def _one_line(exc: BaseException) -> str:
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text or type(exc).__name__


def _failure_message(exc: BaseException) -> str:
    """One line for any failure: the exception's own message where it names the culprit
    (napari-ivote's errors, bad values, files), else what happened and what to do."""
    from ._backend import BackendError
    from .errors import IvoteError

    message = _one_line(exc)
    if isinstance(exc, (IvoteError, UsageError, BackendError)):
        return message
    if isinstance(exc, MemoryError):
        return (f"out of memory ({message}); use a smaller image, radius or number of filters, or "
                "IVOTE_BACKEND=numpy when the GPU's memory is the limit")
    if isinstance(exc, (OSError, ValueError, TypeError, FloatingPointError)):
        return message
    if isinstance(exc, ImportError) and ("pip install" in message or exc.name):
        # a missing optional package is the installation's, not a bug
        return message if "pip install" in message else f"{message}; install it (pip install {exc.name})"
    return (f"internal error ({type(exc).__name__}: {message}); please report it with the command line, "
            "and rerun with IVOTE_DEBUG=1 for the traceback")


def main(argv=None) -> int:
    """Run ``ivote``; every failure is one line on stderr and exit status 2 (130 on Ctrl-C).

    ``IVOTE_DEBUG=1`` shows the traceback instead.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    command = " ".join(filter(None, ("ivote", args.command, getattr(args, "features_command", None))))
    import logging

    logging.getLogger("tifffile").setLevel(logging.CRITICAL)  # its log lines would precede our one-line errors
    try:
        with warnings.catch_warnings():  # a warning is one line, as our own are, not Python's file:line + source
            warnings.showwarning = lambda message, *_, **__: print(f"{command}: warning: {message}", file=sys.stderr)
            from .errors import LayoutWarning

            warnings.simplefilter("ignore", LayoutWarning)  # files name their axes (--axes): no array guesses
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if os.environ.get("IVOTE_DEBUG"):
            raise
        print(f"{command}: interrupted; no output was written or replaced half-way", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place every failure becomes one line
        if os.environ.get("IVOTE_DEBUG"):
            raise
        print(f"{command}: error: {_failure_message(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
