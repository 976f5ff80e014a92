"""``autotune schema``: the JSON Schema of experiment files."""

from __future__ import annotations

import argparse
import json

from autotune.errors import ExitCode
from autotune.experiment import Experiment


def main(args: argparse.Namespace) -> int:
    print(json.dumps(Experiment.model_json_schema(), indent=2))
    return ExitCode.OK
