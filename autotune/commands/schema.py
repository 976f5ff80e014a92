"""``autotune schema``: the JSON Schema of experiment files, or (``--format markdown``) the field
reference docs/reference.md is generated with."""

from __future__ import annotations

import argparse
import json

from autotune.errors import ExitCode
from autotune.experiment import Experiment
from autotune.experiment.reference import markdown


def main(args: argparse.Namespace) -> int:
    if args.format == "markdown":
        print(markdown(), end="")
    else:
        print(json.dumps(Experiment.model_json_schema(), indent=2))
    return ExitCode.OK
