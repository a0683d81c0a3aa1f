"""The notebooks: each runs top to bottom in a fresh process and shows its figures; the committed copies
carry executed outputs (figures as inline PNG images) that match what their code shows.

A fresh run executes the code cells in order in one namespace, as a kernel does, and records what
Jupyter's inline backend would show per cell: a matplotlib figure that is the cell's last expression,
and every pyplot figure open at the end of the cell. Executed copies for the repository are made with
nbclient (``jupyter nbconvert --execute --inplace`` does the same), which the test extras do not need.
"""

import base64
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PNG = b"\x89PNG\r\n\x1a\n"

RUNNER = r'''
import ast
import contextlib
import io
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


class Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for stream in self.streams:
            stream.write(text)
        return len(text)


def in_view(axis, which):
    lo, hi = sorted(axis.get_view_interval())
    tol = 1e-9 * max(abs(lo), abs(hi), 1e-300)
    locs, labels = ((axis.get_majorticklocs(), axis.get_majorticklabels()) if which == "major"
                    else (axis.get_minorticklocs(), axis.get_minorticklabels()))
    return [label.get_text() for loc, label in zip(locs, labels) if lo - tol <= loc <= hi + tol]


def describe(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")  # draws it: tick labels as an image of it shows them
    axes = []
    for ax in fig.axes:
        if not ax.get_visible() or ax.get_label() == "<colorbar>":  # a colorbar is labelled on its long side
            continue
        axes.append({"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                     "xscale": ax.get_xscale(), "xticks": in_view(ax.xaxis, "major"),
                     "xminor": in_view(ax.xaxis, "minor")})
    return {"png": buffer.getvalue()[:8].hex(), "suptitle": fig.get_suptitle(), "axes": axes}


def main(cells_path, report_path):
    cells = json.loads(Path(cells_path).read_text())
    namespace = {"__name__": "__main__"}
    report = []
    for number, source in enumerate(cells):
        tree = ast.parse(source)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
            last = ast.Expression(tree.body.pop().value)
        out = io.StringIO()
        with contextlib.redirect_stdout(Tee(sys.stdout, out)):
            exec(compile(tree, f"<cell {number}>", "exec"), namespace)
            value = None if last is None else eval(compile(last, f"<cell {number}>", "eval"), namespace)
        shown = [value] if isinstance(value, Figure) else []
        shown += [plt.figure(n) for n in plt.get_fignums() if plt.figure(n) is not value]
        report.append({"stdout": out.getvalue(), "figures": [describe(fig) for fig in shown]})
        plt.close("all")
    Path(report_path).write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
'''

_RUNS: dict[Path, list] = {}


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def code_cells(path: Path) -> list[dict]:
    return [c for c in cells(path) if c["cell_type"] == "code"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def markdown(path: Path) -> str:
    return "\n".join(source(c) for c in cells(path) if c["cell_type"] == "markdown")


def committed_images(cell: dict) -> list[bytes]:
    return [base64.b64decode(out["data"]["image/png"]) for out in cell.get("outputs", [])
            if "image/png" in out.get("data", {})]


def committed_stdout(cell: dict) -> str:
    return "".join("".join(out["text"]) for out in cell.get("outputs", [])
                   if out["output_type"] == "stream" and out["name"] == "stdout")


def run(path: Path, tmp_path_factory) -> list[dict]:
    """Run the notebook's code cells in a fresh process, from the notebook's folder (as Jupyter does), with
    this checkout's daskflow; per code cell: its stdout and the figures it shows. Cached per session."""
    if path not in _RUNS:
        pytest.importorskip("matplotlib")
        folder = tmp_path_factory.mktemp(path.stem)
        (folder / "cells.json").write_text(json.dumps([source(c) for c in code_cells(path)]))
        (folder / "runner.py").write_text(RUNNER)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        proc = subprocess.run([sys.executable, str(folder / "runner.py"), str(folder / "cells.json"),
                               str(folder / "report.json")], capture_output=True, text=True, timeout=600,
                              cwd=path.parent, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _RUNS[path] = json.loads((folder / "report.json").read_text())
    return _RUNS[path]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_shows_its_figures(path, tmp_path_factory):
    """Top to bottom without error; every cell shows as many figures as its committed outputs hold images."""
    report = run(path, tmp_path_factory)
    code = code_cells(path)
    assert len(report) == len(code)
    shown = [len(cell["figures"]) for cell in report]
    committed = [len(committed_images(cell)) for cell in code]
    assert shown == committed
    assert sum(shown) >= 1
    for cell in report:
        for fig in cell["figures"]:
            assert bytes.fromhex(fig["png"]) == PNG
            assert fig["axes"] and all(ax["xlabel"] and ax["ylabel"] for ax in fig["axes"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebooks_carry_executed_outputs_with_images(path):
    """Committed executed: code cells numbered in order, no error, figures as inline PNG images."""
    code = code_cells(path)
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1))
    outputs = [out for c in code for out in c["outputs"]]
    assert not [out for out in outputs if out["output_type"] == "error"]
    assert not [out for out in outputs if out["output_type"] == "stream" and out["name"] == "stderr"]
    images = [image for c in code for image in committed_images(c)]
    assert images, f"{path.name} shows no figure"
    assert all(image.startswith(PNG) and len(image) > 5000 for image in images)
    for cell in code:
        if re.search(r"^print\(", source(cell), re.MULTILINE):
            assert committed_stdout(cell), source(cell)[:200]


def test_channel_notebook_says_its_statistics_are_not_converged(tmp_path_factory):
    """A 40-step start-up is no statistically steady state: the prose says so, and a check computed from
    the data (the two halves of the window, its length) prints a warning, in the committed outputs too."""
    path = ROOT / "notebooks" / "02-channel-run-and-analysis.ipynb"
    assert "not converged" in markdown(path)
    warning = "WARNING: these statistics are not converged"
    assert any(warning in committed_stdout(c) for c in code_cells(path))
    report = run(path, tmp_path_factory)
    assert any(warning in cell["stdout"] and "two halves" in cell["stdout"] for cell in report)
    figures = [fig for cell in report for fig in cell["figures"]]
    wall = next(fig for fig in figures if "wall units" in fig["suptitle"])
    mean = wall["axes"][0]
    assert mean["xscale"] == "log" and mean["xlabel"].startswith("$y^+")
    decades = [math.log10(float(t)) for t in mean["xticks"] if t]  # "1", "10", "100"
    assert len(decades) >= 2 and all(d == round(d) for d in decades)
    assert all(b - a == 1.0 for a, b in zip(decades[:-1], decades[1:], strict=True))
    assert not any(mean["xminor"])


def test_scaling_notebook_plots_committed_results_with_whole_gpu_ticks(tmp_path_factory):
    """The results read are committed files that the notebook names with their device; every GPU-count
    axis has whole-number ticks only."""
    path = ROOT / "notebooks" / "03-scaling.ipynb"
    code = "\n".join(source(c) for c in code_cells(path))
    files = sorted(set(re.findall(r'"([\w.-]+\.json)"', code)))
    assert files
    for name in files:
        record = json.loads((ROOT / "docs" / "results" / name).read_text())
        assert name in markdown(path)
        assert record["device"].split()[1] in markdown(path)  # H100, H200
    report = run(path, tmp_path_factory)
    printed = "".join(cell["stdout"] for cell in report)
    assert all(name in printed for name in files)  # the loading cell prints each file with its device
    gpu_axes = [ax for cell in report for fig in cell["figures"] for ax in fig["axes"] if "GPU" in ax["xlabel"]]
    assert len(gpu_axes) >= 3
    for ax in gpu_axes:
        ticks = [t for t in ax["xticks"] if t]
        assert len(ticks) >= 2 and all(re.fullmatch(r"\d+", t) for t in ticks), ticks
        assert not any(ax["xminor"])
