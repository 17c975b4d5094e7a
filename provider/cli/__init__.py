"""The `allset` command: what it says to a person (one line per mistake, never a
traceback), the wiring of `allset serve`, and how that process learns it must stop."""
