"""Planning, pure: cells of a profile, the one eligibility, the one install set, builds, shards, resolution."""
