"""`python -m provider.cli`: the `allset` command without the console script."""

import sys

from provider.cli import run

sys.exit(run())
