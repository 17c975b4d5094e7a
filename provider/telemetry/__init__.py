"""What allset tells operators about its own work: log lines for each attempt, and the
log format."""
