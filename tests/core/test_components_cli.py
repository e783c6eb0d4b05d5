"""``ivote components``: CSV in, components out, one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from ivote.cli import main
from ivote.components import connected_components
from ivote.components._cli import read_edges_csv, size_histogram


@pytest.fixture(autouse=True)
def _numpy_backend(monkeypatch):
    monkeypatch.setenv("IVOTE_BACKEND", "numpy")


def write_edges(path, edges, header="pre,post,weight"):
    rows = [header] + [f"{a},{b},0.5" for a, b in edges]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_cli_writes_components(tmp_path, capsys):
    rng = np.random.default_rng(0)
    ids = np.unique(rng.integers(2**63, 2**64, size=3000, dtype=np.uint64, endpoint=False))
    edges = ids[rng.integers(0, len(ids), size=(1200, 2))]
    edges_csv = write_edges(tmp_path / "edges.csv", edges.tolist())
    out = tmp_path / "components.csv"
    assert main(["components", str(edges_csv), "--columns", "pre,post", "--out", str(out)]) == 0
    expected = connected_components(edges)
    printed = capsys.readouterr().out
    assert f"-> {expected.n_components:,} components" in printed
    assert "component size" in printed
    assert out.read_text().splitlines()[0] == "vertex_id,component,component_size"
    table = np.loadtxt(out, delimiter=",", skiprows=1, dtype=np.uint64)
    np.testing.assert_array_equal(table[:, 0], expected.vertex_ids)  # 64-bit ids written exactly
    np.testing.assert_array_equal(table[:, 1], expected.component)
    np.testing.assert_array_equal(table[:, 2], expected.sizes[expected.component])


def test_reader_default_columns_and_headerless(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text('"src","dst"\n1,2\n18446744073709551615,3\n')
    np.testing.assert_array_equal(read_edges_csv(path), [[1, 2], [2**64 - 1, 3]])
    path.write_text("4,5\n6,7\n")
    np.testing.assert_array_equal(read_edges_csv(path), [[4, 5], [6, 7]])


@pytest.mark.parametrize(
    "text, message",
    [
        ("pre,post\n1,2\n3,\n", "line 3, column 'post': missing vertex id"),
        ("pre,post\n1,2\n3,1.5\n", "'1.5' is not an integer vertex id"),
        ("pre,post\n1,2\nabc,4\n", "line 3, column 'pre': 'abc' is not an integer"),
        ("x,pre,post\n0,1,2\n0,-3,4\n", "column 'pre': negative vertex id -3"),
        ("pre,post\n18446744073709551616,1\n", "does not fit in 64 bits"),
        ("", "is empty"),
        ("pre,post\n", "no edge rows"),
        ("pre,post\n1,2\n3\n", "line 3: only 1 column"),
        ("a,b\n1,2\n", "no column 'pre'; its columns are: a, b"),
    ],
)
def test_cli_bad_csv_one_line_error(tmp_path, capsys, text, message):
    path = tmp_path / "edges.csv"
    path.write_text(text)
    out = tmp_path / "components.csv"
    assert main(["components", str(path), "--columns", "pre,post", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and err.startswith("ivote components: error:")
    assert not out.exists()


def test_cli_missing_file_and_output_folder(tmp_path, capsys):
    assert main(["components", str(tmp_path / "none.csv"), "--out", str(tmp_path / "c.csv")]) == 2
    assert "no such edge file" in capsys.readouterr().err
    edges_csv = write_edges(tmp_path / "edges.csv", [[1, 2]])
    assert main(["components", str(edges_csv), "--out", str(tmp_path / "missing" / "c.csv")]) == 2
    assert "output folder does not exist" in capsys.readouterr().err


def test_size_histogram():
    assert size_histogram(np.array([1, 1, 2, 3, 9, 1000])) == [("1", 2), ("2-3", 2), ("8-15", 1), ("512-1023", 1)]


def test_demo_hook(tmp_path):
    from ivote.components._cli import demo
    from ivote.data import sample_2d, sample_3d

    lines = demo(sample_2d(), sample_3d(), tmp_path)
    assert len(lines) == 2 and all(line.startswith("components:") for line in lines)
    assert (tmp_path / "sample_2d_components.tif").is_file()
