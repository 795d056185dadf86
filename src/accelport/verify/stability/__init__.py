"""Stability: long runs (soak) and collective communication checks (comm)."""
