"""Verify a migration: numerics (dump, compare, curves), speed (bench, profile-diff), stability (soak, comm), acceptance."""


def capture(run_dir, **options):
    """Record a run's numerics into `run_dir`; see `accelport.verify.numerics.dump.capture` (torch is imported lazily)."""
    from accelport.verify.numerics.dump import capture as _capture

    return _capture(run_dir, **options)


# Where each module lived before verify/ was split by concern; `from accelport.verify import bench`
# in a user's training script keeps working for one release, with a DeprecationWarning.
_MOVED = {
    **dict.fromkeys(
        ("dump", "dumpfile", "recorder", "native", "stats_kernel", "compare", "align", "metrics", "replay",
         "curves", "curves_report", "numerics_report", "tfevents"),
        "numerics",
    ),
    **dict.fromkeys(("bench", "profile", "trace", "trace_schema"), "perf"),
    **dict.fromkeys(("soak", "comm"), "stability"),
}


def __getattr__(name: str):
    concern = _MOVED.get(name)
    if concern is None:
        raise AttributeError(f"module 'accelport.verify' has no attribute {name!r}")
    import importlib
    import warnings

    warnings.warn(
        f"accelport.verify.{name} moved to accelport.verify.{concern}.{name}; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return importlib.import_module(f"accelport.verify.{concern}.{name}")
