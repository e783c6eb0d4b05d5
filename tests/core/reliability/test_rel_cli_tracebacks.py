"""Class 3 of issue 16, tracebacks: every failure of the command line is one line naming the
file or option and what to do, exit status 2; the Python API raises ValueError/OSError
subclasses (``ivote.errors``) with the same messages, never a bare KeyError or IndexError."""

import zipfile

import numpy as np
import pytest
import tifffile
from reliability_helpers import assert_one_line_failure, files_in, run_module

from ivote import ConvRBM, InputFileError, IvoteError, TrainingDivergedError
from ivote.io import read_image

RNG = np.random.default_rng(3)

TIFF_HEADER_ONLY = b"II*\x00\x08\x00\x00\x00"  # an 8-byte TIFF header pointing at nothing


def _bad_image(kind, tmp_path, good):
    """A broken image file of the given kind."""
    if kind == "header.tif":
        data = TIFF_HEADER_ONLY
    elif kind == "empty.tif":
        data = b""
    elif kind == "half.tif":
        data = good.read_bytes()[: good.stat().st_size // 2]
    elif kind == "text.tif":
        data = b"y,x\n1,2\n"
    elif kind == "bigendian-header.tif":
        data = b"MM\x00*\x00\x00\x00\x08"
    elif kind == "text.png":
        data = b"not a png"
    else:
        raise AssertionError(kind)
    path = tmp_path / kind
    path.write_bytes(data)
    return path


BAD_IMAGES = ["header.tif", "empty.tif", "half.tif", "text.tif", "bigendian-header.tif", "text.png"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # imageio's plugins, tried on the text 'PNG'
@pytest.mark.parametrize("kind", BAD_IMAGES)
def test_read_image_raises_one_error_class_naming_the_file(kind, tmp_path, image_tif):
    path = _bad_image(kind, tmp_path, image_tif)
    with pytest.raises(InputFileError, match=rf"cannot read {path} as an image .*complete image file") as info:
        read_image(path)
    assert isinstance(info.value, OSError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("kind", BAD_IMAGES)
@pytest.mark.parametrize("command", ["detect", "segment", "features fit", "features apply"])
def test_every_command_reports_a_bad_image_in_one_line(kind, command, tmp_path, cli, image_tif, points_csv):
    path = _bad_image(kind, tmp_path, image_tif)
    model = ConvRBM(2, 3, xp=np).fit(RNG.random((16, 16)), epochs=1).save(tmp_path / "m.npz")
    args = {
        "detect": ["detect", path, "--radius", 4, "--out", tmp_path / "out.csv"],
        "segment": ["segment", path, "--points", points_csv, "--radius", 4, "--out", tmp_path / "out.tif"],
        "features fit": ["features", "fit", path, "--filters", 2, "--size", 3, "--out", tmp_path / "out.npz"],
        "features apply": ["features", "apply", path, "--model", model, "--out", tmp_path / "out.tif"],
    }[command]
    before = files_in(tmp_path)
    status, _, err = cli(*args)
    assert_one_line_failure(status, err, f"cannot read {path} as an image", command=f"ivote {command}")
    assert files_in(tmp_path) == before  # nothing written, no temporary file left


def _model_file(kind, tmp_path):
    good = ConvRBM(2, 3, xp=np).fit(RNG.random((16, 16)), epochs=1).save(tmp_path / "good.npz")
    data = good.read_bytes()
    path = tmp_path / "model.npz"
    arrays = dict(np.load(good))
    if kind == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif kind == "eight bytes":
        path.write_bytes(data[:8])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind in ("no filters", "no stride", "no hidden_bias"):
        arrays.pop(kind.split()[1])
        np.savez(path, **arrays)
    elif kind == "other format":
        np.savez(path, **dict(arrays, format=np.array("something-else")))
    elif kind == "pickled":
        np.savez(path, data=np.array([object()], dtype=object))
    elif kind == "wrong bias shape":
        np.savez(path, **dict(arrays, hidden_bias=np.zeros(5, np.float32)))
    elif kind == "stride 3":
        np.savez(path, **dict(arrays, stride=np.array(3)))
    elif kind == "integer filters":
        np.savez(path, **dict(arrays, filters=np.ones((2, 3, 3), np.int64)))
    elif kind == "1D filters":
        np.savez(path, **dict(arrays, filters=np.ones((2, 3), np.float32)))
    elif kind == "text stride":
        np.savez(path, **dict(arrays, stride=np.array("two")))
    elif kind == "damaged member":
        with zipfile.ZipFile(good) as source, zipfile.ZipFile(path, "w") as target:
            for item in source.infolist():
                content = source.read(item.filename)
                target.writestr(item, content[:20] if item.filename == "filters.npy" else content)
    elif kind == "plain npy":
        np.save(tmp_path / "plain.npy", np.zeros(3))
        path.write_bytes((tmp_path / "plain.npy").read_bytes())
    else:
        raise AssertionError(kind)
    return path


BAD_MODELS = ["truncated", "eight bytes", "empty", "no filters", "no stride", "no hidden_bias", "other format",
              "pickled", "wrong bias shape", "stride 3", "integer filters", "1D filters", "text stride",
              "damaged member", "plain npy"]


@pytest.mark.parametrize("kind", BAD_MODELS)
def test_bad_models_raise_input_file_error_naming_the_file(kind, tmp_path):
    path = _model_file(kind, tmp_path)
    with pytest.raises(InputFileError, match=str(path)) as info:
        ConvRBM.load(path)
    assert isinstance(info.value, OSError)
    assert not isinstance(info.value, (KeyError, IndexError))


@pytest.mark.parametrize("kind", BAD_MODELS)
def test_features_apply_reports_a_bad_model_in_one_line(kind, tmp_path, cli, image_tif):
    path = _model_file(kind, tmp_path)
    before = files_in(tmp_path)
    status, _, err = cli("features", "apply", image_tif, "--model", path, "--out", tmp_path / "f.tif")
    assert_one_line_failure(status, err, str(path), command="ivote features apply")
    assert files_in(tmp_path) == before


def test_missing_model_is_file_not_found(tmp_path, cli, image_tif):
    with pytest.raises(FileNotFoundError, match="model file not found"):
        ConvRBM.load(tmp_path / "none.npz")
    status, _, err = cli("detect", image_tif, "--radius", 4, "--features", tmp_path / "none.npz", "--out",
                         tmp_path / "p.csv")
    assert_one_line_failure(status, err, "model file not found", "none.npz")


def test_diverging_training_api_and_cli(tmp_path, cli, image_tif):
    image = tifffile.imread(image_tif)
    with pytest.raises(TrainingDivergedError, match=r"training diverged in epoch \d+ .*lower learning_rate") as info:
        ConvRBM(4, 5, xp=np).fit(image, epochs=5, learning_rate=1e6)
    assert isinstance(info.value, FloatingPointError) and isinstance(info.value, ValueError)
    status, _, err = cli("features", "fit", image_tif, "--filters", 4, "--size", 5, "--learning-rate", "1e6",
                         "--epochs", 5, "--quiet", "--out", tmp_path / "m.npz")
    assert_one_line_failure(status, err, "training diverged", "learning_rate", command="ivote features fit")
    assert not (tmp_path / "m.npz").exists()


# --- failures from inside a stage -------------------------------------------------------------------------------


def _impossible_allocation() -> MemoryError:
    """NumPy's MemoryError for 8 PiB (malloc refuses it at once; nothing is allocated)."""
    try:
        np.empty(2**50, dtype=np.float64)
    except MemoryError as exc:
        return exc
    raise AssertionError("8 PiB were allocated")


@pytest.mark.parametrize(
    "exception, fragments",
    [
        (MemoryError(), ["out of memory", "smaller image"]),
        (_impossible_allocation(), ["out of memory (Unable to allocate 8.00 PiB", "IVOTE_BACKEND=numpy"]),
        (KeyError("filters"), ["internal error (KeyError: 'filters')", "IVOTE_DEBUG=1"]),
        (RuntimeError("boom\nsecond line"), ["internal error (RuntimeError: boom; second line)", "please report"]),
        (IndexError("index 0 out of range"), ["internal error (IndexError"]),
        (PermissionError(13, "Permission denied", "/data/in.tif"), ["Permission denied", "/data/in.tif"]),
        (FloatingPointError("overflow in x"), ["overflow in x"]),
        (IvoteError("radius must be > 0; got -1"), ["radius must be > 0; got -1"]),
    ],
)
def test_any_exception_in_a_stage_is_one_line(exception, fragments, monkeypatch, tmp_path, cli, image_tif):
    from ivote.detect import _voting

    def fail(*args, **kwargs):
        raise exception

    monkeypatch.setattr(_voting, "iterative_voting", fail)
    status, _, err = cli("detect", image_tif, "--radius", 4, "--out", tmp_path / "p.csv")
    assert_one_line_failure(status, err, *fragments, command="ivote detect")
    assert not (tmp_path / "p.csv").exists()


def test_ctrl_c_is_status_130_and_one_line(monkeypatch, tmp_path, cli, image_tif):
    from ivote.detect import _voting

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(_voting, "iterative_voting", interrupt)
    status, _, err = cli("detect", image_tif, "--radius", 4, "--out", tmp_path / "p.csv")
    assert status == 130 and err.strip() == "ivote detect: interrupted; no output was written or replaced half-way"


def test_ivote_debug_shows_the_traceback(monkeypatch, tmp_path, image_tif):
    from ivote.cli import main
    from ivote.detect import _voting

    def fail(*args, **kwargs):
        raise KeyError("deep")

    monkeypatch.setattr(_voting, "iterative_voting", fail)
    monkeypatch.setenv("IVOTE_DEBUG", "1")
    with pytest.raises(KeyError, match="deep"):
        main(["detect", str(image_tif), "--radius", "4", "--out", str(tmp_path / "p.csv")])


# --- argparse's own errors: one line too ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["detect", "IMG"], "one of the arguments --out --out-dir is required"),  # --radius: optional with --detector
        (["detect", "IMG", "--radius", "4"], "one of the arguments --out --out-dir is required"),
        (["detect", "IMG", "--radius", "abc", "--out", "p.csv"], "argument --radius: must be a positive number or 'auto'; got 'abc'"),
        (["segment", "IMG", "--points", "p.csv", "--radius", "4", "--iterations", "2.5", "--out", "l.tif"],
         "argument --iterations: invalid int value: '2.5'"),
        (["detect", "IMG", "--radius", "4", "--polarity", "sideways", "--out", "p.csv"], "argument --polarity"),
        (["detect", "IMG", "--radius", "4", "--out", "p.csv", "--no-such-option"], "unrecognized arguments"),
        (["features", "fit", "IMG", "--filters", "2", "--size", "3", "--stride", "3", "--out", "m.npz"],
         "argument --stride: invalid choice: 3"),
        (["no-such-command"], "invalid choice: 'no-such-command'"),
    ],
)
def test_usage_errors_are_one_line(args, fragment, capsys):
    from ivote.cli import main

    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert len(err.strip().splitlines()) == 1 and fragment in err and "--help" in err


# --- the same as a user runs it: python -m ivote in a subprocess ---------------------------------------------


@pytest.mark.parametrize(
    "case",
    ["header-only TIFF", "truncated model", "missing input", "bad option value", "bad limit", "bad points"],
)
def test_subprocess_failures_are_one_line_status_2(case, tmp_path, image_tif, points_csv):
    header = tmp_path / "header.tif"
    header.write_bytes(TIFF_HEADER_ONLY)
    model = _model_file("truncated", tmp_path)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("y,x\n1,2\n3\n")
    args, env, fragments = {
        "header-only TIFF": (["detect", header, "--radius", 4, "--out", tmp_path / "p.csv"], None,
                             [f"cannot read {header}"]),
        "truncated model": (["features", "apply", image_tif, "--model", model, "--out", tmp_path / "f.tif"], None,
                            [str(model)]),
        "missing input": (["detect", tmp_path / "none.tif", "--radius", 4, "--out", tmp_path / "p.csv"], None,
                          ["input image not found", "none.tif"]),
        "bad option value": (["segment", image_tif, "--points", points_csv, "--radius", 4, "--iterations", "x",
                              "--out", tmp_path / "l.tif"], None, ["--iterations"]),
        "bad limit": (["detect", image_tif, "--radius", 4, "--out", tmp_path / "p.csv"],
                      {"IVOTE_MAX_WORK": "many"}, ["IVOTE_MAX_WORK"]),
        "bad points": (["segment", image_tif, "--points", ragged, "--radius", 4, "--out", tmp_path / "l.tif"], None,
                       [f"{ragged}, line 3: 1 value(s)"]),
    }[case]
    result = run_module(*args, env=env)
    assert_one_line_failure(result.returncode, result.stderr, *fragments)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


@pytest.mark.parametrize(
    "backend, fragment",
    [("bogus", "IVOTE_BACKEND must be 'auto', 'cupy', 'numba' or 'numpy'; got 'bogus'"),
     ("cupy", "IVOTE_BACKEND=cupy was requested but no usable GPU was found")],
)
def test_a_bad_backend_variable_is_one_line(backend, fragment, monkeypatch, tmp_path, cli, image_tif):
    from ivote._backend import cupy_available

    if backend == "cupy" and cupy_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.setenv("IVOTE_BACKEND", backend)
    status, _, err = cli("detect", image_tif, "--radius", 4, "--out", tmp_path / "p.csv")
    assert_one_line_failure(status, err, fragment, command="ivote detect")


def test_demo_into_a_file_is_one_line(tmp_path, cli):
    target = tmp_path / "afile"
    target.write_text("x")
    status, _, err = cli("demo", "--out", target)
    assert_one_line_failure(status, err, "File exists", str(target), command="ivote demo")
