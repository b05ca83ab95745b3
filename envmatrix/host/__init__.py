"""What this machine offers: its GPUs and drivers, its pip settings."""
