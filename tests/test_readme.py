"""Every fenced code block of README.md works as shown.

- ```python blocks run as scripts, each in a fresh process in an empty temporary folder, with this
  checkout's daskflow.
- ```bash blocks: ``pip install`` steps are not run (they reinstall the package; CI runs the first
  block's two lines itself) and neither is the test suite; ``daskflow run`` commands are run shortened
  (``--steps 2``, output in a temporary folder) after ``daskflow validate`` of the configuration they
  name; other ``daskflow`` commands run as written. ``daskflow`` is this checkout's (``python -m daskflow``).
- ```yaml blocks are configuration sections: merged into the small channel example and validated.
- unlabelled blocks are layouts of the repository: the folders they list exist.
- A block that needs a GPU is marked by the HTML comment ``<!-- gpu -->`` on the line before its fence
  (invisible on a rendered page) and is skipped without CuPy and a CUDA device.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GPU_MARK = "<!-- gpu -->"
FENCE = re.compile(r"^```([\w+-]*)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
# the two lines .ci/run takes from the README (the main job and the test command)
INSTALL_LINES = ("pip install . && daskflow run examples/channel-small.yaml",
                 "pip install '.[test]' && python -m pytest -q")


def blocks(text: str) -> list[dict]:
    """Fenced blocks in order: language, code, the line it starts on, whether ``<!-- gpu -->`` precedes it."""
    found = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").splitlines()
        found.append({"lang": m.group(1).lower(), "code": m.group(2), "line": text.count("\n", 0, m.start()) + 1,
                      "gpu": bool(before) and before[-1].strip() == GPU_MARK})
    return found


BLOCKS = blocks(README.read_text())


def ids(langs: tuple[str, ...]) -> list[str]:
    return [f"line{b['line']}" for b in BLOCKS if b["lang"] in langs]


def env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def skip_without_gpu(block: dict) -> None:
    if block["gpu"]:
        cupy = pytest.importorskip("cupy")
        try:
            if cupy.cuda.runtime.getDeviceCount() < 1:
                pytest.skip("no CUDA device")
        except cupy.cuda.runtime.CUDARuntimeError:
            pytest.skip("no CUDA device")


def daskflow(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "daskflow", *args], capture_output=True, text=True,
                          cwd=cwd, env=env(), timeout=timeout, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"daskflow {' '.join(args)}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_readme_has_the_blocks_ci_relies_on():
    """.ci/run runs the first block's two lines (install and run the main job; install and test)."""
    assert BLOCKS[0]["lang"] == "bash"
    assert [line.strip() for line in BLOCKS[0]["code"].splitlines() if line.strip()] == list(INSTALL_LINES)
    assert {b["lang"] for b in BLOCKS} <= {"bash", "python", "yaml", ""}, "a block no test checks"


def test_gpu_mark_is_read():
    text = "x\n\n<!-- gpu -->\n```python\nimport cupy\n```\n\n```python\npass\n```\n"
    assert [(b["code"], b["gpu"]) for b in blocks(text)] == [("import cupy\n", True), ("pass\n", False)]


@pytest.mark.parametrize("block", [b for b in BLOCKS if b["lang"] == "python"], ids=ids(("python",)))
def test_python_block_runs_as_a_script(block, tmp_path):
    skip_without_gpu(block)
    script = tmp_path / "snippet.py"
    script.write_text(block["code"])
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env(),
                          timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"README.md line {block['line']}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


def shell_commands(code: str) -> list[list[str]]:
    """The commands of a shell block: lines (continuations joined, comments dropped) split at ``&&``."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith("#"):
            commands += [shlex.split(part) for part in line.split("&&")]
    return commands


@pytest.mark.parametrize("block", [b for b in BLOCKS if b["lang"] in ("bash", "sh", "shell", "console")],
                         ids=ids(("bash", "sh", "shell", "console")))
def test_shell_block_commands_work(block, tmp_path):
    skip_without_gpu(block)
    checked = 0
    for command in shell_commands(block["code"]):
        if command[:2] == ["pip", "install"] or command[:3] == ["python", "-m", "pytest"]:
            continue  # reinstalls the package / the test suite itself: CI runs these lines
        assert command[0] == "daskflow", f"README.md line {block['line']}: no check for {shlex.join(command)}"
        args = command[1:]
        if args[0] in ("run", "validate", "jobscript"):
            config = next(a for a in args[1:] if not a.startswith("-"))
            assert "valid" in daskflow(["validate", config], ROOT).stdout
        if args[0] == "run":
            store = tmp_path / "readme-run.zarr"
            daskflow([*args, "--steps", "2", "--output", str(store)], ROOT, timeout=600)
            assert (store / "zarr.json").exists()
        elif args[0] != "validate":
            daskflow(args, tmp_path)
        checked += 1
    assert checked or block is BLOCKS[0]


@pytest.mark.parametrize("block", [b for b in BLOCKS if b["lang"] == "yaml"], ids=ids(("yaml",)))
def test_yaml_block_is_a_valid_configuration_section(block, tmp_path):
    section = yaml.safe_load(block["code"])
    config = yaml.safe_load((ROOT / "examples" / "channel-small.yaml").read_text())
    config.update(section)
    path = tmp_path / "readme.yaml"
    path.write_text(yaml.safe_dump(config))
    shown = daskflow(["validate", str(path)], tmp_path).stdout
    first, _, rest = shown.partition("\n")
    assert ": valid" in first
    used = yaml.safe_load(rest)  # the configuration as a run would use it, every default filled in
    for key, value in section.items():
        assert {k: used[key][k] for k in value} == value, key


@pytest.mark.parametrize("block", [b for b in BLOCKS if b["lang"] == ""], ids=ids(("",)))
def test_repository_layout_block_lists_existing_folders(block):
    folders = re.findall(r"^(\S+)/\s", block["code"], re.MULTILINE)
    assert folders
    for folder in folders:
        assert (ROOT / folder).is_dir(), folder
