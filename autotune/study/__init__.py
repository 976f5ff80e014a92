"""The study engine: Optuna studies, the trial phases, interrupts, the journal."""
