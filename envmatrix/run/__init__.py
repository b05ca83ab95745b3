"""Running cells: the runner, the fork helper's client, process execution."""
