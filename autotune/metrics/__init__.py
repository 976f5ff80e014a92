"""Metric sources: read every metric of a trial for its measurement window."""
