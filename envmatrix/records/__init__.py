"""The contract between running and everything after it: the record, the outcome table, the probe's result."""
