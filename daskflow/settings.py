"""daskflow's own dask configuration keys (``daskflow.*``).

They are declared with their defaults and what they mean in ``daskflow.yaml``, shipped with the
package and registered with dask's defaults when this module is imported, as dask and distributed
register theirs: ``dask.config.get("daskflow.exchange-timeout")`` has a value everywhere, and users
set the keys like any dask key (``dask.config.set``, ``DASK_DASKFLOW__EXCHANGE_TIMEOUT``, a YAML
file in ``~/.config/dask``).
"""

from __future__ import annotations

import os
from typing import Any

import dask
import yaml

PATH = os.path.join(os.path.dirname(__file__), "daskflow.yaml")

with open(PATH) as _file:
    DEFAULTS: dict = yaml.safe_load(_file)

dask.config.update_defaults(DEFAULTS)

CHOICES = {"copy-engine": ("none", "nccl", "ipc")}  # keys whose value is one of a few names


def get(key: str) -> Any:
    """The value of the dask configuration key ``daskflow.<key>`` (its declared default unless set),
    of its default's kind: a switch is a boolean, a number a non-negative number, a choice one of
    :data:`CHOICES`; anything else is a ``ValueError`` naming the key and what it allows."""
    value, default = dask.config.get(f"daskflow.{key}"), DEFAULTS["daskflow"][key]
    if key in CHOICES:
        if value not in CHOICES[key]:
            raise ValueError(f"dask config daskflow.{key}: must be one of {', '.join(CHOICES[key])}, got {value!r}")
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"dask config daskflow.{key}: must be true or false, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"dask config daskflow.{key}: must be a non-negative number, got {value!r}")
    return float(value)


def check() -> None:
    """Every ``daskflow.*`` key read once (:func:`get`): a bad value is refused before a run starts."""
    for key in DEFAULTS["daskflow"]:
        get(key)
