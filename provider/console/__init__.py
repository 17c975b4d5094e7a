"""What the command line says to a person: one line per mistake, never a traceback."""
