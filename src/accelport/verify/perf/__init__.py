"""Speed: step-time benchmarks with confidence intervals, profiler breakdowns and their diff."""
