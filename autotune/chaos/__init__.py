"""Chaos injectors: CPU stress like Chaos Mesh's StressChaos (cluster) or stress-ng (local)."""
