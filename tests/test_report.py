"""benchmarks/report.py writes docs/performance.md: tables from the JSON, plots, unknown files listed."""

import json
import os
import shutil

from tests.helpers import ROOT, benchmark_module


def _report():
    return benchmark_module("report")


def test_report_on_the_committed_results(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(os.path.join(ROOT, "docs", "results"), results)
    (results / "cpu_channel_test.json").write_text(json.dumps(
        {"benchmark": "cpu_channel", "device": "some CPU", "seconds_per_step": 1.25, "ns_per_point_per_step": 41.5}))
    (results / "broken.json").write_text("{not json")
    out = tmp_path / "docs" / "performance.md"
    _report().main(["--results", str(results), "--out", str(out)])
    text = out.read_text()
    assert "{{" not in text
    for known in ["| 512³ | 5.08 | 4.10 | 1.22 | 2.42 | 0.52 | 1.24 | 7.9e-15 |",  # poisson_single_H200
                  "| 1024 | 4.27 | 25.9 | 24.9 | 18.3 | 8.49 | 1.99 |",  # transpose_4xH200
                  "| 4 | 512×2048×512 | ptdma | fused | (1, 4) | 37.2 | 29.3 |",  # poisson_distributed_4xH200
                  "| 4 | ptdma | fused | (1, 4) | 30.8 | 26.7 |",  # ..._weak_final
                  "| ptdma | 1 | 7.7 | (1, 1), stage | 1.00 |",  # weak scaling
                  "| 1 | 512×256×144 | 0.60 | 0.369 | 1.63 |",  # write_throughput_H200
                  "| 296.8 | 3.93 |"]:  # channel_step_4xH200
        assert known in text, known
    assert "What limits the distributed solve" in text  # hand-written analysis kept
    assert "cpu_channel_test.json" in text and "some CPU" in text and "seconds_per_step = 1.25" in text
    assert "`broken.json`: skipped" in text
    assert "within ±25 %" in text and "7168 × 7168 × 1594" in text
    # the H100 refit: parameters with their sources, residuals, what bounds the step, the paper's runs
    assert "## Cost model refit on 4 × H100" in text and "| `host_step_floor` | 22.4 | ms |" in text
    assert "| `host_round` | 1.37 | ms |" in text and "channel_step_floor_4xH100.json" in text
    assert "The limit now is the host, not the links." in text
    assert "| 1024 | strong 7168 × 7168 × 1594 | (512, 2) | ftm | figure only | 1.50 | 2.00 |" in text
    assert "| 1024 | strong 7168 × 7168 × 1594 | (512, 2) | ptdma | figure only | 1.50 | 2.00 |" in text
    figures = tmp_path / "docs" / "figures"
    pngs = list(figures.glob("*.png"))
    assert len(pngs) >= 6
    for png in pngs:
        assert png.stat().st_size < 150_000, png
        assert f"figures/{png.name}" in text


def test_committed_doc_is_up_to_date_with_the_template():
    with open(os.path.join(ROOT, "benchmarks", "performance_template.md")) as f:
        template = f.read()
    with open(os.path.join(ROOT, "docs", "performance.md")) as f:
        doc = f.read()
    for line in template.splitlines():
        if line and not line.startswith("{{"):
            assert line in doc, line
