"""The study engine: Optuna studies, the trial phases, interrupts, the journal.

``loop.StudyRunner`` runs a study's trials; ``trial`` runs one trial's phases (apply, warm up,
stress, measure, recover, restore) on the backends' Protocols and fills a ``record.TrialRecord``,
stored once as the trial's user attrs and journal line. ``confirm`` re-measures the best
candidates; ``nightly.run_night`` runs one night by the rules in ``night/``. The engine knows the
platforms only through ``autotune.targets``, ``autotune.chaos`` and ``autotune.metrics`` and
never imports the report (a verdict function is passed in).
"""
