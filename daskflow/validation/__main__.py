"""``python -m daskflow.validation figures [--data DIR] [--out DIR]``: redraw every figure and print
every table from the committed reduced data; ``python -m daskflow.validation run CASE [--data DIR]``:
rerun one case (see :data:`daskflow.validation.CASES`) and rewrite its data files;
``python -m daskflow.validation reproduce [--steps N] [--cluster KIND] [--pencils PY PZ]``: run the
turbulent channel's first steps with this installation and compare them with the committed run."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from daskflow.validation import CASES

DATA = Path("docs/validation/data")
FIGURES = Path("docs/validation/figures")


def case_module(name: str):
    return importlib.import_module(f"daskflow.validation.{name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m daskflow.validation", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("figures", help="redraw every figure and print every table from the reduced data")
    f.add_argument("--data", type=Path, default=DATA)
    f.add_argument("--out", type=Path, default=FIGURES)
    r = sub.add_parser("run", help="rerun one case and rewrite its reduced data")
    r.add_argument("case", choices=CASES)
    r.add_argument("--data", type=Path, default=DATA)
    r.add_argument("--work", type=Path, default=Path("/tmp/daskflow-validation"),
                   help="where runs that write Zarr stores put them (finished stores there are reused)")
    p = sub.add_parser("reproduce", help="run the channel's first steps and compare them with the committed run "
                                                  "(19 M cells: meant for a GPU host, about a minute on one H200)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--cluster", default="none", help="as daskflow run --cluster (default: in process)")
    p.add_argument("--pencils", type=int, nargs=2, metavar=("PY", "PZ"))
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--work", type=Path, default=Path("/tmp/daskflow-validation"))
    args = parser.parse_args(argv)
    if args.command == "reproduce":
        from daskflow.validation import channel

        result = channel.reproduce(args.data, args.work, args.steps, args.cluster, args.pencils)
        print(channel.reproduction_table(args.data))
        return 0 if result["reproduces"] else 1
    if args.command == "run":
        case_module(args.case).run(args.data, work_dir=args.work)
        print(case_module(args.case).table(args.data))
        return 0
    for name in CASES:
        module = case_module(name)
        for path in module.figures(args.data, args.out):
            print(f"wrote {path}", file=sys.stderr)
        print(f"## {name}\n\n{module.table(args.data)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
