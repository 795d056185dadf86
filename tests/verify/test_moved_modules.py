"""verify/ was split into numerics/, perf/ and stability/: the old import spelling still works for a release."""

import warnings

import pytest


def test_old_spelling_reaches_the_moved_module_with_a_deprecation_warning():
    from accelport.verify.perf import bench as new

    with pytest.warns(DeprecationWarning, match="accelport.verify.perf.bench"):
        from accelport.verify import bench as old
    assert old is new


def test_new_spelling_warns_nothing_and_unknown_names_still_fail():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from accelport.verify.stability import soak  # noqa: F401
    with pytest.raises(ImportError):
        from accelport.verify import nosuch  # noqa: F401
