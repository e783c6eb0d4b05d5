"""The exceptions napari-ivote raises for bad input, unreadable files and limits.

Every one is a :class:`ValueError` (bad input, the Python convention), so
``except ValueError`` keeps working; each also derives from the builtin class
that says what went wrong, so ``except OSError`` around file reading and
``except MemoryError`` around big jobs keep working too. Messages name the
culprit (parameter, file, line, column) and the accepted form; the command
line prints them as one line with exit status 2.

============================  ==============================  ==========================================
class                         also a                           raised when
============================  ==============================  ==========================================
:class:`IvoteError`           ValueError                       any bad input (the base class)
:class:`ParameterTypeError`   TypeError                        a parameter of the wrong type ('abc' as a number)
:class:`InputFileError`       OSError                          an input file is truncated or malformed
:class:`ResourceLimitError`   MemoryError                      estimated work or memory exceeds a limit,
                                                               or the GPU ran out of memory
:class:`TrainingDivergedError` FloatingPointError              feature learning diverged (NaN/Inf)
============================  ==============================  ==========================================
"""

from __future__ import annotations

__all__ = ["AutoRadiusWarning", "InputFileError", "LayoutWarning", "IvoteError", "ParameterTypeError", "ResourceLimitError", "TrainingDivergedError"]


class IvoteError(ValueError):
    """Bad input to napari-ivote; the message names the culprit and the accepted form."""


class ParameterTypeError(IvoteError, TypeError):
    """A parameter of the wrong type, e.g. text where a number belongs; both a ValueError
    (bad input) and a TypeError (Python's convention for a wrong type)."""


class InputFileError(IvoteError, OSError):
    """An input file exists but cannot be used: truncated, malformed, of the wrong kind."""

    def __str__(self) -> str:  # OSError's two-argument form is never used here
        return str(self.args[0]) if self.args else ""


class ResourceLimitError(IvoteError, MemoryError):
    """The estimated work or memory of a call exceeds its limit (see ``docs/reliability.md``)."""


class TrainingDivergedError(IvoteError, FloatingPointError):
    """Training produced NaN or infinite values; the message says which setting to lower."""


class AutoRadiusWarning(UserWarning):
    """``radius="auto"`` bounded its estimate (by the image or the memory limit) or is unsure of it;
    the message, and the result's ``radius_note``, say which."""


class LayoutWarning(UserWarning):
    """An in-memory array whose shape has two readings ((Y, X, 3): RGB or a 3-plane stack; (3, Y, X):
    a 3-plane stack or colour first); the message says which was taken and how to pass the other."""
