"""faults package."""
