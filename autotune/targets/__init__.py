"""Targets: where a candidate configuration is applied (a local process, a Deployment)."""
