"""See inside the Go scheduler: parse ``GODEBUG=schedtrace`` output, detect run-queue overflow.

The modules here are pure (no processes, no I/O): ``schedtrace`` turns the runtime's stderr lines
into ``Sample`` records and summary metrics, ``overflow`` decides from a run-queue time series
whether the local run queues overflowed into the global one for long enough to matter.
"""
