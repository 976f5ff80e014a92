"""autotune: find Go runtime settings that hold up under CPU contention, with evidence."""

__version__ = "0.1.0"
