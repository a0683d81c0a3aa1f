"""Shared by the benchmark scripts: print the result document as JSON, and keep a copy if asked."""

from __future__ import annotations

import json


def emit(document: dict, path: str | None = None) -> None:
    """Print ``document`` (indented JSON) and also write it to ``path`` when given."""
    text = json.dumps(document, indent=2)
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
