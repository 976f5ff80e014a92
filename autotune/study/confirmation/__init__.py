"""Confirmation: the top search configurations and the baseline measured again, interleaved,
until the report can give a verdict it can stand behind. Read in this order:

- ``run``: ``confirm``, the loop (round 1 planned, then the looks, at most one extension, at
  most two tie-breaks; or the fixed rounds), and the plan of round 1;
- ``candidates``: what is confirmed (the search's best distinct feasible configurations);
- ``standing``: the runs a look judges, read as the report reads them (confirmation runs only,
  scaled when the baseline drifted, a differing pool member left out);
- ``looks``: the sequential looks and why their error rate holds;
- ``extension``: one more round for a leader just short of "better";
- ``tiebreak``: one or two more runs of two candidates before the choice by the mean;
- ``adaptive``: the fixed design's adaptive rounds (``--fixed``);
- ``attrs``: what a confirmation records on the study for the report and later nights.
"""
