"""Chaos injectors: CPU stress like Chaos Mesh's StressChaos (in a cluster, or stress-ng locally)."""
