"""Pure: everything a run left -> outcome, evidence, remedy."""
