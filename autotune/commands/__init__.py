"""One module per ``autotune`` command, each with ``main(args) -> int`` (pre-commit's shape):
``autotune.cli`` parses the command line and imports the chosen module only then, once the
signal handlers are installed (see autotune/cli.py), so these modules import what they need at
the top. What several commands share has a module of its own: ``session`` (the experiment
loaded, the study runner and its display, the study run), ``outcome`` (an exception becomes a
message and an exit code).

Arrows: cli -> commands -> backends, doctor, platforms, report, study, ... (never back up).
The names below are the command line's own vocabulary, light enough for the parser.
"""

# autotune.report.export.FORMATS, spelled out: importing it loads Optuna, seconds spent before
# main() could install the signal handlers (tests/unit/test_exit_codes.py keeps them equal).
EXPORT_FORMATS = ("kustomize", "env", "json", "helm-values")
PROMOTE_DIR_VAR, PROMOTE_FORMAT_VAR = "AUTOTUNE_PROMOTE_DIR", "AUTOTUNE_PROMOTE_FORMAT"
