"""What every room stands on and nothing of allset's own: the injected clock, failpoints
for crash tests, private files and the local SQLite store. Local state under --state-dir is
a speed-up and a record, never the truth: the cloud's tags are, and losing that directory
must never cost a committed instance."""
