"""Local state under --state-dir (SQLite). A speed-up and a record, never the truth: the
cloud's tags are, and losing this directory must never cost a committed instance."""
