"""The installed distribution's version (``0+unknown`` in a checkout that was never installed)."""

from importlib import metadata


def installed_version() -> str:
    try:
        return metadata.version("daskflow")
    except metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = installed_version()
