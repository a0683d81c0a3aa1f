"""The command line, run for real in a subprocess (the README's main job)."""

import json
import subprocess
import sys


def _run(*args: str, timeout: float = 300):
    return subprocess.run([sys.executable, "-m", "daskflow", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_poisson_demo_on_an_embedded_cluster():
    proc = _run("poisson", "--shape", "24", "16", "16", "--pencils", "1", "2", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ran"] == "local Dask cluster"
    assert result["relative_residual"] < 1e-12
    assert result["max_error_vs_exact"] < 0.05  # second-order discretisation error at 16 cells
    assert "dashboard" in proc.stderr


def test_poisson_demo_in_process_with_ftm():
    proc = _run("poisson", "--shape", "16", "16", "16", "--pencils", "2", "2", "--method", "ftm",
                "--cluster", "none", "--device", "cpu", "--bc", "DD", "NN", "ND")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["relative_residual"] < 1e-12


def test_bad_input_is_a_clear_error_before_any_cluster():
    proc = _run("poisson", "--shape", "16", "16", "16", "--pencils", "1", "12", "--device", "cpu")
    assert proc.returncode == 2
    assert "pencils" in proc.stderr and "P-TDMA needs at least two z points" in proc.stderr
    assert "Traceback" not in proc.stderr and "dashboard" not in proc.stderr
    proc = _run("poisson", "--bc", "PN", "PP", "NN")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
