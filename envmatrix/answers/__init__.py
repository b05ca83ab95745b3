"""Follow-up questions answered by real runs: bisect, doctor."""
