"""What records become: findings, vetting, HTML and terminal reports, CSV/JSON, locks."""
