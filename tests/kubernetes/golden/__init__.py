"""Golden files: what autotune sends to the API server, reviewed as files.

Set ``UPDATE_GOLDEN=1`` to rewrite them after an intended change, then review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent


def _dump(name: str, data: Any) -> str:
    if name.endswith(".json"):
        return json.dumps(data, indent=2, sort_keys=True) + "\n"
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def load(name: str) -> Any:
    text = (HERE / name).read_text()
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


def check_golden(name: str, data: Any) -> None:
    path = HERE / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(_dump(name, data))
    assert path.exists(), f"no golden file {name}: run with UPDATE_GOLDEN=1 and review it"
    assert load(name) == json.loads(json.dumps(data)), f"{name} differs (UPDATE_GOLDEN=1?)"
