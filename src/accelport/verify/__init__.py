"""Verify a migration: numerics (dump, compare, curves), speed (bench, profile-diff), stability (soak, comm), acceptance."""
