"""daskflow's dask configuration keys: declared once, with defaults, in the shipped daskflow.yaml."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from daskflow import settings

ROOT = Path(__file__).resolve().parents[1]


def test_every_key_the_package_reads_is_declared_and_read_through_settings():
    read, direct = set(), []
    for path in (ROOT / "daskflow").rglob("*.py"):
        text = path.read_text()
        read |= set(re.findall(r'settings\.get\("([a-z-]+)"\)', text))
        if path.name != "settings.py":  # its docstring shows the dask spelling
            direct += [f"{path.name}: {m}" for m in re.findall(r'dask\.config\.get\("daskflow\.[^"]*"', text)]
    assert read == set(settings.DEFAULTS["daskflow"]), (read, settings.DEFAULTS)
    assert not direct, direct  # a key read past settings would carry its default in code again


def test_the_defaults_are_registered_and_users_override_them_as_dask_keys():
    code = ("import json, dask\n"
            "from daskflow.pencils import direct, link\n"
            "from daskflow import profiling\n"
            "print(json.dumps([link.exchange_timeout(), direct.gpu_switch_interval(), profiling.phases_enabled(),\n"
            "                  dask.config.get('daskflow.exchange-timeout')]))")

    def run(**env):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT), **env}, cwd=ROOT)
        return json.loads(proc.stdout)

    assert run() == [600.0, 0.0002, False, 600]
    assert run(DASK_DASKFLOW__EXCHANGE_TIMEOUT="7", DASK_DASKFLOW__PROFILE_PHASES="True")[::2] == [7.0, True]


def test_a_bad_value_is_refused_naming_the_key_before_a_run_starts():
    import dask
    import pytest

    from daskflow.config import load
    from tests.helpers import CHANNEL

    for key, value, allowed in (("exchange-timeout", "ten", "non-negative number"),
                                ("gpu-switch-interval", -1, "non-negative number"),
                                ("control-interval", "1ms", "non-negative number"),
                                ("profile-phases", "yes", "true or false"),
                                ("distributed-cuda-graphs", 1, "true or false"),
                                ("copy-engine", "on", "one of none, nccl, ipc")):
        with dask.config.set({f"daskflow.{key}": value}):
            with pytest.raises(ValueError, match=f"dask config daskflow.{key}: must be (a )?{allowed}"):
                load(CHANNEL)
    assert load(CHANNEL)["grid"]
