"""What a confirmed verdict rests on: each candidate's confirmation runs alone (not the search
measurement that chose it), each judged at the level that keeps the whole family of candidates
within the error rate (Bonferroni). Both were measured to matter when nothing differs
(docs/measurements/null-2026-12-04.txt)."""

from __future__ import annotations

from pathlib import Path

from autotune.evidence import significance as sig
from autotune.report import build_report, document, markdown
from autotune.study.confirmation.attrs import CONFIDENCE_ATTR, RULE, RULE_ATTR
from autotune.study.confirmation.candidates import BASELINE
from autotune.study.confirmation.looks import look_levels
from autotune.study.confirmation.run import confirm
from autotune.study.confirmation.standing import pooled_values
from tests.report.builder import Builder, m
from tests.report.builder import experiment as builder_experiment
from tests.report.simstudy import EXPERIMENT, open_sim

BASELINE_RUNS = [10.0, 10.4, 10.8, 10.2, 10.6, 10.5]
SETTINGS = [{"GOMAXPROCS": 1, "GOGC": 400}, {"GOMAXPROCS": 2, "GOGC": 400},
            {"GOMAXPROCS": 2, "GOGC": 200}]


def _study(tmp: Path, candidates: list[tuple[float, list[float]]], *,
           sequential: bool = True) -> Builder:
    """Search trials then confirmation rounds: candidate i is (its search value, its
    confirmation runs); the baseline's 3 repeats then 3 interleaved runs. The study recorded a
    family level of 96% (a sequential confirmation whose early looks could decide: 4 rounds,
    or a study continued over nights; 3 rounds from scratch record 95% since 2026-12-04)."""
    bld = Builder(builder_experiment(), tmp)
    for settings, (searched, _) in zip(SETTINGS, candidates, strict=False):
        bld.add("search", "search", settings, m(searched))
    base = bld.exp.baseline_settings()
    for i, v in enumerate(BASELINE_RUNS):
        bld.add("reference", "baseline" if i < 3 else "confirm", base, m(v),
                **({} if i < 3 else {"candidate": BASELINE, "round": i - 2}))
    for trial, (settings, (_, runs)) in enumerate(zip(SETTINGS, candidates, strict=False)):
        for r, v in enumerate(runs, start=1):
            bld.add("reference", "confirm", settings, m(v), candidate=trial, round=r)
    if sequential:  # a --fixed confirmation records no family level
        bld.studies.search.set_user_attr(CONFIDENCE_ATTR, look_levels(3).verdict)
    return bld


def test_the_search_measurement_that_chose_a_candidate_is_not_evidence_for_it(
        tmp_path: Path) -> None:
    # The search measured 8.0 once (why it was chosen); confirmed, it measures like the
    # baseline but a little lower. Pooled with 8.0 the interval called it better (low +1.0%);
    # on its three confirmation runs it is unclear: no ADOPT on the luck that chose it.
    bld = _study(tmp_path, [(8.0, [9.5, 9.7, 10.3])])
    report = build_report(bld.exp, bld.studies)
    (candidate,) = report.candidates
    assert [r.study for r in candidate.runs] == ["reference"] * 3
    assert candidate.search_values == (8.0,)
    assert candidate.comparisons[0].n_candidate == 3
    assert report.verdict == "inconclusive"
    assert "search measurement(s) that chose them are left out" in report.evidence_note
    # The look pools what the report judges (same values, same order).
    assert pooled_values(bld.studies, SETTINGS[0]) == [9.5, 9.7, 10.3]


def test_one_candidate_is_judged_at_the_family_level(tmp_path: Path) -> None:
    bld = _study(tmp_path, [(9.6, [9.5, 9.7, 10.1])])
    report = build_report(bld.exp, bld.studies)
    assert report.candidates[0].comparisons[0].confidence == look_levels(3).verdict
    assert report.verdict == "adopt"
    assert "each judged at" not in report.method


def test_with_three_candidates_each_is_judged_at_a_third_of_the_error(tmp_path: Path) -> None:
    # The same runs that one candidate adopts on (96%: low +1.0%) are not enough when the report
    # had three chances to find one (98.67% each: low 0): INCONCLUSIVE, not ADOPT.
    bld = _study(tmp_path, [(9.6, [9.5, 9.7, 10.1]), (9.9, [10.3, 10.5, 10.7]),
                            (10.0, [10.4, 10.2, 10.6])])
    report = build_report(bld.exp, bld.studies)
    each = sig.each_of(look_levels(3).verdict, 3)
    assert round(each, 4) == 0.9867
    assert {c.comparisons[0].confidence for c in report.candidates} == {each}
    assert report.verdict == "inconclusive"
    assert "3 candidates, each judged at 98.67%" in report.method


def test_a_candidate_measured_once_can_be_ruled_out_with_its_search_run_not_adopted(
        tmp_path: Path) -> None:
    # Dropped after round 1 for a better one, a candidate has one confirmation run. Its search
    # run flatters it, so "not better" said with it holds without it: the verdict can KEEP
    # rather than say INCONCLUSIVE for want of runs.
    worse = _study(tmp_path / "worse", [(12.9, [12.6, 12.7, 12.8]), (13.0, [13.1])])
    report = build_report(worse.exp, worse.studies)
    once = report.candidates[1].comparisons[0]
    assert (once.outcome, once.with_search, once.n_candidate) == ("not better", 1, 2)
    assert ("n=2 (1 confirmation run(s) + 1 search measurement(s), used only to rule it out) "
            "vs 6") in sig.describe(once)
    assert report.verdict == "keep current"
    # The same two runs far better than the baseline adopt nothing: "better" needs three
    # confirmation runs.
    better = _study(tmp_path / "better", [(5.0, [5.1])])
    report = build_report(better.exp, better.studies)
    assert report.candidates[0].comparisons[0].outcome == "unclear"
    assert report.verdict == "inconclusive"


def test_a_study_confirmed_under_the_old_rule_says_its_verdict_may_differ(
        tmp_path: Path) -> None:
    # The same runs, recorded by a confirm() of today (RULE_ATTR) and by one older than the
    # rule (no attr): only the old study's report warns that the verdict it printed then, on
    # the same runs, may differ from this one.
    new = _study(tmp_path / "today", [(8.0, [9.5, 9.7, 10.3])])
    today = build_report(new.exp, new.studies)
    old = _study(tmp_path / "old", [(8.0, [9.5, 9.7, 10.3])])
    old.studies.search.set_user_attr(RULE_ATTR, None)  # Optuna deletes no attr: None is "absent"
    before = build_report(old.exp, old.studies)
    assert "did not record its verdict rule" not in today.evidence_note
    assert "did not record its verdict rule" in before.evidence_note
    assert "the verdict reported then may differ" in markdown.render(document.build(before, {}))
    assert before.verdict == today.verdict  # the note does not change the verdict


def test_a_study_confirmed_on_the_bootstrap_alone_says_its_verdict_may_differ(
        tmp_path: Path) -> None:
    # Rule 2 (before the exact rank test): the note names what changed, in words a reader of
    # the report knows, and no other rule's note.
    study = _study(tmp_path / "rule2", [(8.0, [9.5, 9.7, 10.3])])
    study.studies.search.set_user_attr(RULE_ATTR, 2)
    report = build_report(study.exp, study.studies)
    assert ("called a candidate better on the bootstrap interval alone"
            in report.evidence_note)
    assert "its verdict may differ from the one reported then" in report.evidence_note
    assert "did not record its verdict rule" not in report.evidence_note
    current = _study(tmp_path / "rule3", [(8.0, [9.5, 9.7, 10.3])])
    assert "bootstrap interval alone" not in build_report(current.exp,
                                                          current.studies).evidence_note


def test_a_fixed_study_of_rule_3_says_it_now_needs_three_runs(tmp_path: Path) -> None:
    # Review finding: the fixed rounds need 3 runs a side since 2026-12-07; a study they
    # adopted on 2 would change its verdict on re-reporting without a word.
    fixed3 = _study(tmp_path / "fixed3", [(8.0, [9.5, 9.7, 10.3])], sequential=False)
    fixed3.studies.search.set_user_attr(RULE_ATTR, 3)
    assert "adopt on 2 runs a side" in build_report(fixed3.exp, fixed3.studies).evidence_note
    sequential3 = _study(tmp_path / "seq3", [(8.0, [9.5, 9.7, 10.3])])
    sequential3.studies.search.set_user_attr(RULE_ATTR, 3)
    assert "2 runs a side" not in build_report(sequential3.exp,
                                                sequential3.studies).evidence_note


def test_confirm_records_the_rule_it_judged_by(tmp_path: Path) -> None:
    sim = open_sim(tmp_path, EXPERIMENT.replace("noise: 0.03", "noise: 0.0"))
    sim.runner.run(sim.studies, 6)
    assert RULE_ATTR not in sim.studies.search.user_attrs
    confirm(sim.exp, sim.studies, sim.runner, top=2, repeats=3, seed=5)
    assert sim.studies.search.user_attrs[RULE_ATTR] == RULE
    assert "did not record its verdict rule" not in build_report(sim.exp, sim.studies).evidence_note
