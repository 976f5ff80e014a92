"""``autotune confirm``: re-measure the top candidates and the baseline, interleaved and
shuffled, in rounds until the verdict is decisive (``autotune.study.confirmation``), and give the
verdict."""

from __future__ import annotations

import argparse

from autotune.commands import session
from autotune.errors import ExitCode, StudyError
from autotune.progress import RichProgress
from autotune.study import storage as st
from autotune.study.confirmation.run import confirm
from autotune.study.loop import Progress
from autotune.study.night.opening import moved_since


def main(args: argparse.Namespace) -> int:
    exp, digest = session.load(args.file)
    studies = st.open_existing(exp, st.storage_url(exp, args.storage), as_measured=True,
                               measuring=True)
    moved = st.baseline_moved(exp, studies.reference.get_trials(deepcopy=False))
    if moved is not None:  # its runs would be pooled with the old baseline's
        raise StudyError([f"study {studies.search.study_name!r}: {moved}; `autotune run` "
                          "starts a study for the new baseline (warm-started from this one)"])
    progress: Progress | None = None
    try:
        runner, progress = session.runner(exp, digest, args.plain, args.context)
        since = moved_since(exp, studies, runner.backends.target.describe())
        if since:  # before the study is touched: confirm() records its plan first
            runner.close()
            raise StudyError([f"study {studies.search.study_name!r} was measured on another "
                              f"environment ({'; '.join(since)}): its runs would be compared "
                              "with runs of this one; `autotune run` starts a study of its own "
                              "(warm-started from this one)"])
        done = confirm(exp, studies, runner, top=args.top, repeats=args.repeats,
                       seed=exp.study.seed, extra=args.extra, sequential=not args.fixed)
        session.capture(exp, studies, runner)
    finally:
        if isinstance(progress, RichProgress):
            progress.stop()
    print(f"{done} confirmation trials completed")
    print(session.verdict_text(exp, studies))
    return ExitCode.OK
