import sys

try:
    from daskflow.cli import main

    sys.exit(main())
except KeyboardInterrupt:  # Ctrl-C before the run's own handler is in place (imports, argument parsing)
    print("daskflow: interrupted", file=sys.stderr)
    sys.exit(130)
