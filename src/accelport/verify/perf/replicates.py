"""Variances of many rows, each from a few replicate captures, moderated towards what the rows share.

With three captures per side a row's own between-capture variance has four degrees
of freedom: too few to trust alone, and ignoring it (assuming every row drifts as
much as the typical one) is what lets a row the machine moved in one capture pass for
a regression. The empirical Bayes answer of Smyth (2004, "Linear models and
empirical Bayes methods for assessing differential expression", the `limma` moderated
t) is used: the rows' variances are taken as draws from a scaled inverse chi-square
prior with d0 degrees of freedom and scale s0², both fitted to the rows by the method
of moments on log variances; each row's posterior variance weighs its own variance
(df) against s0² (d0), and its t statistic has d0 + df degrees of freedom. When the
rows' variances differ by more than sampling explains (one row drifted between
captures), d0 comes out small and every row leans on its own variance; when they
agree, d0 is large and the rows share theirs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

_SERIES_FROM = 6.0  # the asymptotic series below are accurate to ~1e-10 from here on


def digamma(x: float) -> float:
    """psi(x) for x > 0: the recurrence psi(x) = psi(x + 1) - 1/x up to 6, then the asymptotic series."""
    if x <= 0:
        raise ValueError(f"digamma needs x > 0, got {x}")
    shift = 0.0
    while x < _SERIES_FROM:
        shift -= 1.0 / x
        x += 1.0
    inv2 = 1.0 / (x * x)
    series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
    return shift + math.log(x) - 0.5 / x - series


def trigamma(x: float) -> float:
    """psi'(x) for x > 0: the recurrence psi'(x) = psi'(x + 1) + 1/x² up to 6, then the asymptotic series."""
    if x <= 0:
        raise ValueError(f"trigamma needs x > 0, got {x}")
    shift = 0.0
    while x < _SERIES_FROM:
        shift += 1.0 / (x * x)
        x += 1.0
    inv = 1.0 / x
    inv2 = inv * inv
    series = inv + inv2 / 2 + inv * inv2 * (1 / 6 - inv2 * (1 / 30 - inv2 * (1 / 42 - inv2 / 30)))
    return shift + series


def trigamma_inverse(value: float) -> float:
    """The y > 0 with trigamma(y) = value (trigamma falls from infinity to 0: bisection on log y)."""
    if value <= 0:
        raise ValueError(f"trigamma_inverse needs a positive value, got {value}")
    low, high = -30.0, 30.0  # log y; trigamma(e^-30) ~ e^60, trigamma(e^30) ~ e^-30
    for _ in range(200):
        mid = (low + high) / 2
        if trigamma(math.exp(mid)) > value:
            low = mid
        else:
            high = mid
    return math.exp((low + high) / 2)


def fit_prior(variances: Sequence[float], df: float) -> tuple[float, float]:
    """(d0, s0²) of the scaled inverse chi-square prior the rows' variances (each on `df`) are drawn from.

    The method of moments of Smyth (2004), section 6.2: log s² has mean
    log s0² + digamma(df/2) - log(df/2) + log(d0/2) - digamma(d0/2) and variance
    trigamma(df/2) + trigamma(d0/2). When the log variances scatter no more than
    sampling on `df` explains, the rows share one variance: d0 is infinite.
    """
    if len(variances) < 2:
        raise ValueError("fitting a prior needs the variances of at least two rows")
    if min(variances) <= 0:
        raise ValueError("variances must be positive (floor them first)")
    centred = [math.log(v) - digamma(df / 2) + math.log(df / 2) for v in variances]
    mean = statistics.fmean(centred)
    excess = statistics.variance(centred, mean) - trigamma(df / 2)
    if excess <= 0:
        return math.inf, math.exp(mean)
    d0 = 2 * trigamma_inverse(excess)
    return d0, math.exp(mean + digamma(d0 / 2) - math.log(d0 / 2))


def moderated(variance: float, df: float, d0: float, s0_squared: float) -> tuple[float, float]:
    """(posterior variance, its degrees of freedom) of one row: its own `variance` on `df` weighed against the prior."""
    if math.isinf(d0):
        return s0_squared, math.inf
    return (d0 * s0_squared + df * variance) / (d0 + df), d0 + df
