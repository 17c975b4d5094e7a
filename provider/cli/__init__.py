"""The `allset` command: what it says to a person (one line per mistake, never a
traceback), the wiring of `allset serve`, and how that process learns it must stop."""

from __future__ import annotations


def run() -> int:
    """The console script. A Ctrl-C while the command's modules are still being imported
    ends it as one during its work does (main.main): one line, status 130."""
    import sys

    try:
        from provider.cli.main import main
    except KeyboardInterrupt:
        print("allset: interrupted", file=sys.stderr)
        return 130
    return main()
