"""Griffe extension for the API reference: the docstrings' reST roles as code spans.

The docstrings are numpydoc and name other objects with reST roles
(``:func:`iterative_voting```, ``:class:`~ivote.ImageFile```), which Markdown would show
verbatim; this turns each into a code span (the last dotted part for a ``~`` name) and
``:doi:`X``` into a link to https://doi.org/X; a numbered citation
(``.. [1] ...``) becomes an item of a numbered list.
"""

from __future__ import annotations

import re

from griffe import Extension

_CITATION = re.compile(r"^(\s*)\.\. \[(\d+)\]\s+", re.MULTILINE)
_DOI = re.compile(r":(?:doi|DOI):`([^`]+)`")
_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|obj|exc|const|ref|term):`(~?)([^`<]+?)(?:\s*<[^>]+>)?`")


def _code_span(match: re.Match) -> str:
    short, name = match.group(1), match.group(2).strip()
    return f"`{name.rsplit('.', 1)[-1] if short else name}`"


class SphinxRoles(Extension):
    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            text = _DOI.sub(lambda m: f"[doi:{m.group(1)}](https://doi.org/{m.group(1)})", obj.docstring.value)
            text = _CITATION.sub(lambda m: f"{m.group(1)}{m.group(2)}. ", text)
            obj.docstring.value = _ROLE.sub(_code_span, text)
