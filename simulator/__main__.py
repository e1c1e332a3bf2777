"""``python -m simulator``: the command line (``simulator.cli``)."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
