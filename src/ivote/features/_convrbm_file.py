"""The ConvRBM's model file (``.npz``, no pickled objects): its format tag, the
parameters it must hold, and the checks a file passes before a model is built from
it (``ConvRBM.save`` and ``ConvRBM.load``, ``_convrbm.py``)."""

from __future__ import annotations

import numpy as np

from ..errors import InputFileError

_FORMAT = "ivote-convrbm-1"
_MODEL_KEYS = ("filters", "hidden_bias", "visible_bias", "stride", "seed", "init_scale")


def _model_problem(arrays) -> str | None:
    """What is wrong with a loaded model's parameters, or None."""
    filters, hidden_bias = arrays["filters"], arrays["hidden_bias"]
    if filters.dtype not in (np.float32, np.float64) or filters.ndim not in (3, 4) or filters.shape[0] < 1:
        return (f"filters must be a float32/float64 array (n_filters, *2 or 3 sizes); got {filters.dtype} "
                f"of shape {filters.shape}")
    if hidden_bias.shape != filters.shape[:1]:
        return f"hidden_bias must have one value per filter ({filters.shape[0]}); got shape {hidden_bias.shape}"
    for name in ("filters", "hidden_bias", "visible_bias"):
        values = arrays[name]
        if values.dtype.kind not in "fiu" or not np.isfinite(values).all():
            return f"its {name} hold NaN, infinite or non-numeric values (a diverged or damaged training)"
    for name in ("stride", "seed", "init_scale"):
        if arrays[name].shape != () or arrays[name].dtype.kind not in "fiu":
            return f"{name} must be a single number; got {arrays[name]!r}"
    if int(arrays["stride"]) not in (1, 2, 4):
        return f"stride must be 1, 2 or 4; got {arrays['stride']}"
    if "hidden_extent" in arrays and str(arrays["hidden_extent"]) not in ("valid", "same"):
        return f"hidden_extent must be 'valid' or 'same'; got {arrays['hidden_extent']}"
    return None


def write_model(handle, **arrays) -> None:
    """The model's arrays into an open binary file, under the format tag."""
    np.savez(handle, format=np.array(_FORMAT), **arrays)


def read_model(path) -> dict:
    """The arrays of the model file ``path``, checked (FileNotFoundError for a missing
    file, :class:`~ivote.errors.InputFileError` naming it for anything else)."""
    from ..io import check_input_file

    check_input_file(path, "model file")
    try:
        archive = np.load(path, allow_pickle=False)
    except MemoryError:
        raise
    except Exception as exc:  # not an .npz, truncated, or one holding pickled objects
        raise InputFileError(f"{path} is not a napari-ivote ConvRBM model (an .npz from 'ivote features fit'); "
                             f"reading it failed with {type(exc).__name__}") from exc
    try:
        with archive as data:
            if "format" not in data or str(data["format"]) != _FORMAT:
                raise InputFileError(f"{path} is not a napari-ivote ConvRBM model ({_FORMAT})")
            missing = [k for k in _MODEL_KEYS if k not in data]
            if missing:
                raise InputFileError(f"{path} is an incomplete ConvRBM model (no {', '.join(missing)}); "
                                     "write it again with 'ivote features fit'")
            arrays = {k: data[k] for k in data.files}
    except (InputFileError, MemoryError):
        raise
    except Exception as exc:  # a member cut short or damaged
        raise InputFileError(f"{path} is a damaged ConvRBM model ({type(exc).__name__}: {exc}); write it again "
                             "with 'ivote features fit'") from exc
    problem = _model_problem(arrays)
    if problem:
        raise InputFileError(f"{path}: {problem}; write the model again with 'ivote features fit'")
    return arrays
