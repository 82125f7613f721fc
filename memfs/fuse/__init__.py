"""The read-only, per-agent pyfuse3 view of the stores: current files only."""
