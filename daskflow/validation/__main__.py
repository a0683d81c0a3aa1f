"""``python -m daskflow.validation``: the validation campaign's commands.

* ``figures [--data DIR] [--out DIR]``: redraw every figure and print every table from the reduced data;
* ``run CASE [--data DIR] [--work DIR]``: rerun one case (see :data:`daskflow.validation.CASES`) and
  write its reduced data;
* ``reproduce [--steps N] [--cluster KIND] [--pencils PY PZ] [--data DIR] [--record DIR]``: run the
  turbulent channel's first steps with this installation and compare them with the committed run.

Where files come from and go. The committed reduced data and the example configurations the cases
run are found by :mod:`daskflow.data`: the repository's ``docs/validation/data`` and ``examples``
when daskflow is imported from a checkout (an editable install, or the repository on ``sys.path``),
the copies installed with the package otherwise (a wheel). Nothing is ever written into the
installed package: in a checkout the figures go to ``docs/validation/figures`` and the data of a
rerun case and the reproduction records to ``docs/validation/data`` (the committed files, which is
how the campaign updates them); from an installed package they go to the current directory. The
options choose other folders (``--out`` the figures, ``--data`` the data a command reads, and
writes for ``run``, ``--record`` where ``reproduce`` appends its record: ``--data`` when that is
given). A folder that is not there stops the command with a one-line message and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from daskflow import data
from daskflow.validation import CASES

PROG = "python -m daskflow.validation"


def committed_data() -> Path:
    """The committed reduced data: the checkout's ``docs/validation/data`` or the installed copy."""
    return data.folder("validation")


def output_dir(checkout_folder: str) -> Path:
    """Where a command writes by default: ``checkout_folder`` of the checkout daskflow is imported
    from, or the current directory for an installed package."""
    root = data.source_tree()
    return root / checkout_folder if root is not None else Path.cwd()


def case_module(name: str):
    return importlib.import_module(f"daskflow.validation.{name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("figures", help="redraw every figure and print every table from the reduced data")
    f.add_argument("--data", type=Path, help="reduced data to draw (default: the committed data)")
    f.add_argument("--out", type=Path, help="folder for the PNG files (default: docs/validation/figures of "
                                            "the checkout, or the current directory for an installed package)")
    r = sub.add_parser("run", help="rerun one case and write its reduced data")
    r.add_argument("case", choices=CASES)
    r.add_argument("--data", type=Path, help="folder for the reduced data (default: docs/validation/data of "
                                             "the checkout, or the current directory for an installed package)")
    r.add_argument("--work", type=Path, default=Path("/tmp/daskflow-validation"),
                   help="where runs that write Zarr stores put them (finished stores there are reused)")
    p = sub.add_parser("reproduce", help="run the channel's first steps and compare them with the committed run "
                                         "(19 M cells: meant for a GPU host, about a minute on one H200)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--cluster", default="none", help="as daskflow run --cluster (default: in process)")
    p.add_argument("--pencils", type=int, nargs=2, metavar=("PY", "PZ"))
    p.add_argument("--data", type=Path, help="the committed run's reduced data (default: the committed data)")
    p.add_argument("--record", type=Path, help="folder of channel180-reproduction.json, which the result is "
                                               "appended to (default: --data if given, else docs/validation/data "
                                               "of the checkout, or the current directory for an installed package)")
    p.add_argument("--work", type=Path, default=Path("/tmp/daskflow-validation"))
    args = parser.parse_args(argv)
    try:
        return _command(args)
    except FileNotFoundError as error:
        print(f"{PROG} {args.command}: {error}", file=sys.stderr)
        return 2


def _command(args) -> int:
    if args.command == "reproduce":
        from daskflow.validation import channel

        source = args.data or committed_data()
        record = args.record or args.data or output_dir("docs/validation/data")
        _require_dir(source, "no reduced data of the committed run")
        result = channel.reproduce(source, args.work, args.steps, args.cluster, args.pencils, record)
        print(channel.reproduction_table(record))
        return 0 if result["reproduces"] else 1
    if args.command == "run":
        target = args.data or output_dir("docs/validation/data")
        case_module(args.case).run(target, work_dir=args.work)
        print(case_module(args.case).table(target))
        return 0
    source, out = args.data or committed_data(), args.out or output_dir("docs/validation/figures")
    _require_dir(source, "no reduced data")
    for name in CASES:
        module = case_module(name)
        for path in module.figures(source, out):
            print(f"wrote {path}", file=sys.stderr)
        print(f"## {name}\n\n{module.table(source)}\n")
    return 0


def _require_dir(folder: Path, what: str) -> None:
    if not Path(folder).is_dir():
        raise FileNotFoundError(f"{folder}: {what} there (--data DIR names another folder)")


if __name__ == "__main__":
    sys.exit(main())
