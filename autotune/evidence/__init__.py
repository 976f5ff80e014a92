"""Pure statistics about measurements, below both the study engine (confirmation, drift) and the
report (verdict, equivalence): significance of a difference, bootstrap intervals. Imports nothing
of autotune but its leaves."""
