"""daskflow installed from a wheel, away from the checkout.

The wheel is built from a copy of this source tree and installed into a fresh virtual environment
that sees the dependencies of the interpreter running the tests but neither the checkout nor an
editable install of it (their ``.pth`` hooks are not processed there). From a folder outside the
repository, the installed console script runs the small channel example shipped in the wheel, the
validation figures are drawn from the shipped reduced data, and the cost model is fitted to the
shipped benchmark results exactly as in the checkout.

Skips only when no wheel can be built for lack of tooling: pip, or setuptools with ``bdist_wheel``
here (used without build isolation, nothing downloaded) or else from the package index.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# not part of a build: VCS, caches, build outputs, stores, wheels of other projects
IGNORE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".*cache", ".hypothesis",
                                ".whl", ".scratch", ".benchmarks", "*.zarr", "out")
OFFLINE = ("Could not find a version that satisfies", "No matching distribution found", "Failed to establish",
           "Network is unreachable", "Temporary failure in name resolution", "ProxyError")

pytestmark = pytest.mark.slow


def _run(command, cwd, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _local_build_tooling() -> bool:
    """Whether this interpreter can build the wheel without build isolation: the setuptools version
    pyproject.toml's build-system asks for, with bdist_wheel (built in from setuptools 70.1, else
    the ``wheel`` package)."""
    needed = re.search(r'"setuptools>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    probe = ("import importlib.util, setuptools; print(setuptools.__version__); "
             "print(importlib.util.find_spec('wheel') is not None or "
             "importlib.util.find_spec('setuptools.command.bdist_wheel') is not None)")
    out = _run([sys.executable, "-c", probe], cwd=ROOT.parent)
    if out.returncode != 0:
        return False
    version, bdist_wheel = out.stdout.split()
    have = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    want = tuple(int(x) for x in needed.group(1).split(".")[:2]) if needed else (0,)
    return have >= want and bdist_wheel == "True"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of a copy of this source tree (a build in the checkout would leave ``build/`` there,
    whose stale files end up in later wheels)."""
    if _run([sys.executable, "-m", "pip", "--version"], cwd=ROOT.parent).returncode != 0:
        pytest.skip("no pip to build the wheel with")
    base = tmp_path_factory.mktemp("wheel")
    source = base / "daskflow-src"
    shutil.copytree(ROOT, source, ignore=IGNORE)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", base / "dist", source]
    local = _local_build_tooling()
    if local:
        command.insert(4, "--no-build-isolation")
    built = _run(command, cwd=base, timeout=600)
    output = built.stdout + built.stderr
    if built.returncode != 0 and not local and any(sign in output for sign in OFFLINE):
        pytest.skip("no build tooling: setuptools with bdist_wheel is neither installed nor downloadable")
    assert built.returncode == 0, output
    (path,) = (base / "dist").glob("daskflow-*.whl")
    return path


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment holding the wheel; the host's site-packages folders are added
    as plain paths (so no ``.pth`` of theirs runs: no editable finder) after its own."""
    env = tmp_path_factory.mktemp("env") / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", env], cwd=env.parent).returncode == 0
    python = env / "bin" / "python"
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=env).stdout.strip()
    host = [p for p in sys.path if p and Path(p).is_dir() and Path(p).name in ("site-packages", "dist-packages")
            and not Path(p).resolve().is_relative_to(ROOT)]
    Path(site, "host-dependencies.pth").write_text("".join(f"{p}\n" for p in host))
    # --ignore-installed: a daskflow installed on the host (pip install . in CI) is visible through the
    # host paths and would otherwise count as already installed
    install = ["install", "--no-deps", "--no-index", "--ignore-installed", "--disable-pip-version-check", wheel]
    # this interpreter's pip installs into the environment (pip >= 22.3); else the environment gets its own
    installed = _run([sys.executable, "-m", "pip", "--python", python, *install], cwd=env.parent)
    if installed.returncode != 0 and "--python" in installed.stderr:
        assert _run([python, "-m", "ensurepip"], cwd=env.parent).returncode == 0
        installed = _run([python, "-m", "pip", *install], cwd=env.parent)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return env


@pytest.fixture()
def elsewhere(tmp_path) -> Path:
    """A working folder outside the repository, and a clean environment for the commands."""
    assert not tmp_path.resolve().is_relative_to(ROOT)
    return tmp_path


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return {**env, "PYTHONNOUSERSITE": "1", "MPLBACKEND": "Agg"}


def _python(venv, code: str, cwd: Path):
    out = _run([venv / "bin" / "python", "-c", code], cwd=cwd, env=_env())
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_wheel_holds_every_module_and_the_shipped_data_once(wheel):
    from daskflow import data

    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "daskflow").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert modules <= names, sorted(modules - names)
    assert "daskflow/daskflow.yaml" in names  # the declared dask configuration keys
    shipped = {"examples": ("channel-small.yaml", "cavity100.yaml", "cavity1000.yaml", "channel180.yaml"),
               "validation": ("laminar.json", "taylor_green.json", "cavity.json", "channel180.json",
                              "channel180-scalars.csv", "channel180-slice.npz"),
               "results": ("poisson_single_H200.json", "channel_step_H200.json", "transpose_4xH200.json")}
    for name, files in shipped.items():
        for file in files:
            assert f"daskflow/data/{name}/{file}" in names
            assert (ROOT / data.FOLDERS[name] / file).is_file()
        assert not (ROOT / "daskflow" / "data" / name).exists()  # one copy: the repository's folder


def test_installed_package_is_the_wheel_and_finds_its_data(venv, elsewhere):
    found = _python(venv, "import json, daskflow, daskflow.data as d\n"
                          "from daskflow.validation import cavity, channel\n"
                          "from daskflow.validation.__main__ import committed_data, output_dir\n"
                          "print(json.dumps({'file': daskflow.__file__, 'tree': str(d.source_tree()), "
                          "'examples': str(d.path('examples', 'channel-small.yaml')), 'channel': str(channel.EXAMPLE), "
                          "'cavity': cavity.config_for(1000, 16, 'c.zarr')['physics']['nu'], "
                          "'validation': str(committed_data()), 'figures': str(output_dir('docs/validation/figures')), "
                          "'results': str(d.path('results'))}))", elsewhere)
    prefix = str(venv.resolve())
    assert found["file"].startswith(prefix) and not found["file"].startswith(str(ROOT))
    assert found["tree"] == "None" and found["cavity"] == 0.001
    for key in ("examples", "channel", "validation", "results"):
        assert found[key].startswith(prefix), (key, found[key])
    assert Path(found["figures"]).resolve() == elsewhere.resolve()  # outside a checkout: the current folder


def test_installed_console_script_runs_the_shipped_example(venv, elsewhere):
    example = _python(venv, "import json; from daskflow import data; "
                            "print(json.dumps(str(data.path('examples', 'channel-small.yaml'))))", elsewhere)
    store = elsewhere / "X.zarr"
    env = {**_env(), "DASKFLOW_NUMBA": "0"}  # the array code: no compilation of the loops in a fresh install
    out = _run([venv / "bin" / "daskflow", "run", example, "--steps", "2", "--cluster", "none", "--output", store],
               cwd=elsewhere, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    import xarray as xr

    scalars = xr.open_zarr(str(store), group="scalars", consolidated=False)
    assert int(scalars.step[-1]) == 2


def test_installed_validation_figures_and_calibration(venv, elsewhere):
    out = _run([venv / "bin" / "python", "-m", "daskflow.validation", "figures", "--out", "figs"], cwd=elsewhere,
               env=_env(), timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    pngs = {p.name for p in (elsewhere / "figs").glob("*.png")}
    assert {"cavity100-centrelines.png", "laminar-poiseuille.png", "taylor-green-orders.png",
            "channel180-history.png", "channel180-streaks.png"} <= pngs
    assert "## channel" in out.stdout and "| 1000 | 128² |" in out.stdout
    missing = _run([venv / "bin" / "python", "-m", "daskflow.validation", "figures", "--data", "nowhere"],
                   cwd=elsewhere, env=_env())
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr

    from daskflow import perfmodel

    fitted = _python(venv, "import dataclasses, json; from daskflow import perfmodel as pm; "
                           "print(json.dumps([sorted(pm.load_results()), dataclasses.asdict(pm.calibrate())]))",
                     elsewhere)
    assert fitted[0] == sorted(perfmodel.load_results())
    assert fitted[1] == json.loads(json.dumps(dataclasses.asdict(perfmodel.calibrate())))
