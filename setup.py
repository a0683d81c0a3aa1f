"""Packaging that pyproject.toml cannot state: data folders of the repository shipped inside the package.

The example configurations, the committed reduced validation data and the benchmark results live
once, in the folders the README, the docs, the tests and CI name (``examples/``,
``docs/validation/data/``, ``docs/results/``). Each is mapped with ``package_dir`` onto a data-only
package under ``daskflow.data`` (no copies, no symlinks), so wheels and sdists carry them and an
installed daskflow finds them with ``importlib.resources`` (:mod:`daskflow.data`). The package list
is discovered (``find_packages``) and extended by these names: ``[tool.setuptools] packages`` would
have to list every code package by hand, and ``packages.find`` does not follow ``package-dir``.
"""

from setuptools import find_packages, setup

# package -> (repository folder, files shipped); daskflow.data.FOLDERS names the same folders
DATA = {
    "daskflow.data.examples": ("examples", ["*.yaml"]),
    "daskflow.data.validation": ("docs/validation/data", ["*.csv", "*.json", "*.npz"]),
    "daskflow.data.results": ("docs/results", ["*.json"]),
}

setup(
    packages=find_packages(include=["daskflow", "daskflow.*"]) + list(DATA),
    package_dir={package: folder for package, (folder, _) in DATA.items()},
    package_data={"daskflow": ["daskflow.yaml"], **{package: files for package, (_, files) in DATA.items()}},
)
