"""The Optuna internals autotune relies on, in one place (checked against Optuna 5.0).

Each function names the public API Optuna lacks; when one appears, its function goes. An Optuna
upgrade that renames an internal breaks here and nowhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial

if TYPE_CHECKING:
    # What BaseStorage.get_all_studies returns; Optuna does not export the name.
    from optuna.study._frozen import FrozenStudy


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """The storage's id of a trial.

    Missing public API: a trial id. ``number`` counts within one study, but every storage method
    (``get_trial``, ``set_trial_system_attr``, ``set_trial_state_values``, ...) takes the id that
    is unique across the storage, which Optuna keeps as ``_trial_id``."""
    return trial._trial_id


def study_id(study: FrozenStudy) -> int:
    """The storage's id of a study, which grows with creation order.

    Missing public API: a study id or creation time; ``get_all_studies`` returns studies in no
    documented order."""
    return study._study_id


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage a study reads and writes.

    Missing public API: ``Study.storage``. A ``Trial`` has a public ``storage`` attribute, but
    between trials (an interrupted one to re-queue, the one just finished to read back) there
    is no ``Trial``, only the study."""
    return study._storage


def get_trial(study: optuna.Study, trial_id_: int) -> FrozenTrial:
    """One trial of ``study``, by storage id, read afresh (not from the study's trial cache).

    Missing public API: a lookup by id; ``Study.get_trials`` reads every trial of the study
    to find one."""
    return storage_of(study).get_trial(trial_id_)


def system_attrs(trial: optuna.Trial) -> dict[str, Any]:
    """A running trial's system attrs (``failed_trial`` of a retry, samplers' notes).

    Missing public API: ``Trial.system_attrs`` (Optuna 5 has none); its storage id is
    private."""
    return trial.storage.get_trial_system_attrs(trial_id(trial))


def set_system_attr(study: optuna.Study, trial: FrozenTrial, key: str, value: Any) -> None:
    """Note ``key`` on the trial a sampler is sampling for.

    Missing public API: a sampler receives the study and a ``FrozenTrial``, which has no
    ``set_system_attr`` (its ``set_user_attr`` changes only the copy, and user attrs belong to
    the objective anyway)."""
    storage_of(study).set_trial_system_attr(trial_id(trial), key, value)


RDB_PRIVATE_ENTRY_POINTS = ("_create_new_trial", "_set_trial_param", "_get_best_trial_id",
                            "_get_trials", "_get_stale_trial_ids")
"""The private ``RDBStorage`` methods Optuna's own ``_CachedStorage`` calls in place of the
public ones (optuna/storages/_cached_storage.py): a wrapper of the storage's entry points
(``autotune.study.storage``) must wrap these too. Missing public API: none to replace; the
cache layer is internal and calls what it likes."""
