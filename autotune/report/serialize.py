"""Report -> report.json (every field of the Report; NaN/inf become null: JSON has neither)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from autotune.report.model import Report


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def as_data(report: Report) -> dict[str, Any]:
    data: dict[str, Any] = _clean(dataclasses.asdict(report))
    return data


def to_json(report: Report) -> str:
    return json.dumps(as_data(report), indent=2, allow_nan=False) + "\n"
