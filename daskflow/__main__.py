import sys

from daskflow.cli import main

sys.exit(main())
