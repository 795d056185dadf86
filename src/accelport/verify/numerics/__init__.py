"""Numerics: capture what a run computes (dump), compare two captures, compare training curves."""
