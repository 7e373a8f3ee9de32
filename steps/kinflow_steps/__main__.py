"""Entry point: ``python -m kinflow_steps --step KEY [--manifest FILE]``."""

import sys

from kinflow_steps.cli import main

if __name__ == "__main__":
    sys.exit(main())
