"""The docs site's sources hold together without building it (CI builds it with ``mkdocs build --strict``).

Checked here, on the files themselves: every page the navigation names exists and every page is in
the navigation; every object an API page renders (``::: ivote.x``) imports; the benchmarks page is a
current results page (at most 300 lines, every stage's section names its hardware and date); the
citation file's references carry a DOI each; the pages describe the product, not the making of it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    return []


def _config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def test_every_nav_page_exists_and_every_page_is_in_the_nav():
    nav = _nav_pages(_config()["nav"])
    missing = [page for page in nav if not (DOCS / page).is_file()]
    assert not missing, f"pages in mkdocs.yml's nav that docs/ lacks: {missing}"
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "_ext" not in p.parts}
    orphans = sorted(pages - set(nav))
    assert not orphans, f"pages in docs/ that the nav does not list: {orphans}"


def _resolve(dotted: str):
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


API_NAMES = sorted({
    match.group(1)
    for page in (DOCS / "api").glob("*.md")
    for match in re.finditer(r"^::: (\S+)", page.read_text(encoding="utf-8"), re.MULTILINE)
})


def test_api_pages_name_objects():
    assert len(API_NAMES) > 40  # the public API, not a stub page
    assert "ivote.detect._voting.iterative_voting" in API_NAMES


@pytest.mark.parametrize("dotted", API_NAMES)
def test_every_api_name_imports_and_has_a_docstring(dotted):
    obj = _resolve(dotted)
    assert (getattr(obj, "__doc__", None) or "").strip(), f"{dotted} has no docstring to render"


def test_the_documented_iterative_voting_is_the_public_one():
    import ivote
    from ivote.detect import _voting

    # the API page renders _voting's function, which ivote.iterative_voting wraps
    assert ivote.iterative_voting.__wrapped__ is _voting.iterative_voting


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_benchmarks_page_is_a_current_results_page():
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    sections = _sections(text)
    stages = [name for name in sections if name not in ("How it is measured", "Reproducing")]
    assert len(stages) >= 8
    hardware = re.compile(r"H100|H200|2-core VM|16-core Xeon")
    date = re.compile(r"20\d\d-\d\d-\d\d")
    for name in stages:
        body = sections[name]
        assert hardware.search(body), f"benchmarks.md '{name}' names no hardware"
        assert date.search(body), f"benchmarks.md '{name}' gives no date"
        assert "benchmarks/" in body, f"benchmarks.md '{name}' gives no command"


NARRATION = re.compile(
    r"\b(session|sitting|sessions|today|yesterday|not lent|was not lent|other jobs on the machine|"
    r"helper-\d+|work log)\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("page", ["index.md", "benchmarks.md", "detect.md", "features.md", "segment.md",
                                  "components.md", "methods.md", "architecture.md", "how-to/files.md",
                                  "how-to/measure-export.md", "how-to/big-volumes.md", "how-to/gpu-cpu.md"])
def test_pages_describe_the_product(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    hits = sorted({m.group(0) for m in NARRATION.finditer(text)})
    assert not hits, f"docs/{page} narrates its making: {hits}"


def test_citation_file_cites_the_methods_papers():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["cff-version"] == "1.2.0"
    references = citation["references"]
    dois = {ref["doi"] for ref in references}
    assert all(re.fullmatch(r"10\.\d{4,9}/\S+", doi) for doi in dois)
    # iterative voting in 3D, the frequency-domain ConvRBM, the level sets with shape priors, ECL-CC
    for doi in ("10.3389/fnana.2018.00028", "10.1162/NECO_a_00682", "10.4103/2153-3539.92029",
                "10.1145/3208040.3208041"):
        assert doi in dois
    # the method pages cite the same papers
    for page, doi in (("detect.md", "10.3389/fnana.2018.00028"), ("features.md", "10.1162/NECO_a_00682"),
                      ("segment.md", "10.4103/2153-3539.92029"), ("components.md", "10.1145/3208040.3208041")):
        assert doi in (DOCS / page).read_text(encoding="utf-8"), f"docs/{page} does not cite {doi}"
