"""The experiment file: models, loading, validation."""

from autotune.experiment.load import load_experiment, parse_experiment
from autotune.experiment.models import Experiment, Parameter, Setting

__all__ = ["Experiment", "Parameter", "Setting", "load_experiment", "parse_experiment"]
