"""The store-thread benchmark runs on the CPU and reports both modes (a small grid, one round)."""

import json
import subprocess
import sys

from tests.helpers import ROOT


def test_output_overlap_benchmark_reports_both_modes(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/output_overlap.py", "--device", "cpu", "--shape", "16", "8",
                           "8", "--every", "2", "--rounds", "1"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["benchmark"] == "output_overlap" and doc["device"] and doc["steps"] == 8
    assert set(doc["seconds_per_step"]) == {"thread", "waiting"}
    assert all(len(v) == 1 and v[0] > 0 for v in doc["seconds_per_step"].values())
