"""The jobs of a night (``autotune.study.nightly`` runs them in order), one module each:

- ``fingerprint``: what the numbers were measured on (the environment and its id);
- ``opening``: which study tonight's runs go to, and the warm start of a new one;
- ``budget``: how many search trials fit before ``study.deadline``;
- ``early_stop``: when the search has converged, and the loop's stop rule;
- ``drift``: whether the last recommendation still beats the production setting;
- ``records``: the ``night:<id>`` record each run writes, and reading them back.

Nothing is re-exported here: each name is imported from the module that decides it.
"""
