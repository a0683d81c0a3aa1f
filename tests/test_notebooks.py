"""The notebooks run top to bottom (code cells executed in order in a fresh process)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    pytest.importorskip("matplotlib")
    cells = json.loads(path.read_text())["cells"]
    code = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    script = tmp_path / "notebook.py"
    script.write_text("import matplotlib\nmatplotlib.use('Agg')\n\ndef main():\n"
                      + "\n".join("    " + line for line in code.splitlines())
                      + "\n\nif __name__ == '__main__':\n    main()\n")
    # run from the notebook's folder, as Jupyter does
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=path.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
