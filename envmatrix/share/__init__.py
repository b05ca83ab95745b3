"""Sharing results: publish records as a signed static site, and read published sites back, bounded and verified."""
