"""`python -m provider.cli`: the `allset` command without the console script."""

import sys

from provider.cli.main import main

sys.exit(main())
