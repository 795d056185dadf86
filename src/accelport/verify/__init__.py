"""Verify a migration: numerics (dump, compare, curves), speed (bench, profile-diff), stability (soak, comm), acceptance."""


def capture(run_dir, **options):
    """Record a run's numerics into `run_dir`; see `accelport.verify.numerics.dump.capture` (torch is imported lazily)."""
    from accelport.verify.numerics.dump import capture as _capture

    return _capture(run_dir, **options)
