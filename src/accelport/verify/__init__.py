"""Verify a migration: numerics (dump, compare, curves), speed (bench, profile-diff), stability (soak, comm), acceptance."""


def capture(run_dir, **options):
    """Record a run's numerics into `run_dir`; see `accelport.verify.dump.capture` (torch is imported lazily)."""
    from accelport.verify.dump import capture as _capture

    return _capture(run_dir, **options)
