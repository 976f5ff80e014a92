"""The docs a user reads hold: every experiment shown validates, every `autotune ...` command
shown parses with the real parser, every relative link leads to a file, the README stays a
front door (<= 200 lines), and every measured figure in the README cites a dated file that
exists. Pure text and argparse: no process is started."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from autotune.cli import build_parser
from autotune.experiment import parse_experiment

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").rglob("*.md"))]
GUIDES = [README, *sorted((ROOT / "docs").glob("*.md"))]
"""The hand-written pages: the README and docs/*.md (not the generated reports under docs/)."""

README_MAX_LINES = 200

COMMANDS_NOT_YET_IN_PARSER: frozenset[str] = frozenset()
"""Subcommands the docs may show while another change adds them to the parser (`init` was one
until it arrived). Each entry must NOT be in the parser yet
(test_commands_waiting_for_the_parser_are_still_missing): once it is, remove it here and its
lines are parsed like every other."""

FILES_NOT_YET_WRITTEN: frozenset[str] = frozenset()
"""Link targets another change is writing (docs/reference.md was one until it arrived). Each
must not exist yet (test_files_waiting_to_be_written_are_still_missing): once it does, remove
it here."""


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- experiments ------------------------------------------------------------------------------

def _experiments() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for i, block in enumerate(re.findall(r"```ya?ml\n(.*?)```", doc.read_text(), re.S)):
            # an experiment, not a fragment (a Kubernetes manifest, a `target:` snippet)
            if re.search(r"^name:", block, re.M) and re.search(r"^target:", block, re.M):
                found.append((f"{_rel(doc)}#{i}", block))
    return found


def test_the_docs_show_at_least_one_experiment() -> None:
    assert _experiments()


@pytest.mark.parametrize(("where", "text"), _experiments(), ids=[w for w, _ in _experiments()])
def test_every_experiment_shown_validates(where: str, text: str) -> None:
    parse_experiment(text)


# --- commands ---------------------------------------------------------------------------------

_PROMPT = re.compile(r"^\s*(?:\$\s+)?(?:\.venv/bin/)?autotune\s")
_SHELL_END = {">", ">>", "|", "&&", "||", ";", "2>&1", "&"}


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", text, re.S | re.M)


def _commands() -> list[tuple[str, list[str]]]:
    """Every `autotune ...` line of a code block, as the argv the parser gets."""
    found = []
    for doc in GUIDES:
        for block in _code_blocks(doc.read_text()):
            lines = block.replace("\\\n", " ").splitlines()
            for line in lines:
                if not _PROMPT.match(line):
                    continue
                words = shlex.split(line, comments=True)
                if words[0] == "$":
                    words = words[1:]
                argv = []
                for word in words[1:]:
                    if word in _SHELL_END:
                        break
                    argv.append(word)
                found.append((f"{_rel(doc)}: autotune {shlex.join(argv)}", argv))
    return found


def test_the_docs_show_commands() -> None:
    shown = {argv[0] for _, argv in _commands() if argv}
    assert {"run", "validate", "report", "nightly"} <= shown, shown


@pytest.mark.parametrize(("where", "argv"), _commands(), ids=[w for w, _ in _commands()])
def test_every_command_shown_parses(where: str, argv: list[str]) -> None:
    if argv and argv[0] in COMMANDS_NOT_YET_IN_PARSER:
        pytest.skip(f"`autotune {argv[0]}` is not in the parser yet (COMMANDS_NOT_YET_IN_PARSER)")
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:  # argparse's way of refusing (its message is on stderr)
        pytest.fail(f"{where}: the parser refuses {argv} (exit {e.code})")


def _subcommands() -> set[str]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if a.dest == "command"]
    assert sub.choices is not None
    return set(sub.choices)


def test_commands_waiting_for_the_parser_are_still_missing() -> None:
    arrived = COMMANDS_NOT_YET_IN_PARSER & _subcommands()
    assert not arrived, (f"{sorted(arrived)} now in the parser: remove them from "
                         "COMMANDS_NOT_YET_IN_PARSER so the docs' lines are checked")


# --- the README as a front door ---------------------------------------------------------------

def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move the detail to docs/")


_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _links() -> list[tuple[str, str]]:
    found = []
    for doc in GUIDES:
        # links in prose, not in code blocks
        text = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", doc.read_text(), flags=re.S | re.M)
        text = re.sub(r"`[^`\n]*`", "", text)  # code spans: a pattern's [a-z](...) is no link
        for m in _LINK.finditer(text):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # an absolute URL (https:, mailto:) or an anchor on the same page
            path = target.split("#", 1)[0]
            resolved = (doc.parent / path).resolve()
            found.append((f"{_rel(doc)} -> {target}", _rel(resolved) if resolved.is_relative_to(
                ROOT) else str(resolved)))
    return found


def test_the_docs_link_to_files() -> None:
    assert _links()


@pytest.mark.parametrize(("where", "path"), _links(), ids=[w for w, _ in _links()])
def test_every_relative_link_leads_to_a_file(where: str, path: str) -> None:
    if path in FILES_NOT_YET_WRITTEN:
        pytest.skip(f"{path} is being written by another change (FILES_NOT_YET_WRITTEN)")
    assert (ROOT / path).exists(), f"{where}: no such file {path}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, only letters, digits, spaces, hyphens
    and underscores kept, spaces to hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    text = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", doc.read_text(), flags=re.S | re.M)
    found: set[str] = set()
    for m in re.finditer(r"^#{1,6} +(.+?)#*$", text, re.M):
        slug, n = _slug(m.group(1)), 1
        unique = slug
        while unique in found:  # GitHub numbers repeated headings: -1, -2, ...
            unique, n = f"{slug}-{n}", n + 1
        found.add(unique)
    return found


def _anchored_links() -> list[tuple[str, Path, str]]:
    out = []
    for doc in GUIDES:
        text = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", doc.read_text(), flags=re.S | re.M)
        text = re.sub(r"`[^`\n]*`", "", text)  # code spans: a pattern's [a-z](...) is no link
        for m in _LINK.finditer(text):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or "#" not in target:
                continue
            path, anchor = target.split("#", 1)
            if path and not path.endswith(".md"):
                continue  # a line of a source file, say: the file link test covers it
            out.append((f"{_rel(doc)} -> {target}", (doc.parent / path) if path else doc,
                        anchor))
    return out


def test_the_docs_link_to_anchors() -> None:
    assert _anchored_links()


@pytest.mark.parametrize(("where", "path", "anchor"), _anchored_links(),
                         ids=[w for w, _, _ in _anchored_links()])
def test_every_anchor_leads_to_a_heading(where: str, path: Path, anchor: str) -> None:
    assert path.is_file(), f"{where}: no such file"
    assert anchor in _anchors(path), f"{where}: no heading with the anchor #{anchor}"


def test_files_waiting_to_be_written_are_still_missing() -> None:
    arrived = {p for p in FILES_NOT_YET_WRITTEN if (ROOT / p).exists()}
    assert not arrived, (f"{sorted(arrived)} now exist: remove them from FILES_NOT_YET_WRITTEN "
                         "so links to them are checked")


# --- measured figures cite their files --------------------------------------------------------

_FIGURE = re.compile(r"\d(?:[\d.,]*\d)?\s?(?:%|ms|µs|s\b|min\b|rps\b|x\b)")
_MEASUREMENT = re.compile(r"docs/measurements/[\w.-]+")


def _results_paragraphs() -> list[str]:
    """The README's results section, one paragraph or bullet each."""
    text = README.read_text()
    m = re.search(r"^## What it finds.*?$(.*?)^## ", text, re.S | re.M)
    assert m, "README.md has no '## What it finds' section (the headline results)"
    return [p for p in re.split(r"\n\s*\n|\n(?=- )", m.group(1)) if p.strip()]


def test_the_readme_states_measured_results() -> None:
    assert any(_FIGURE.search(p) and _MEASUREMENT.search(p) for p in _results_paragraphs())


@pytest.mark.parametrize("paragraph", [p for p in _results_paragraphs() if _FIGURE.search(p)])
def test_every_figure_in_the_readme_results_cites_a_measurement_file(paragraph: str) -> None:
    cited = _MEASUREMENT.findall(paragraph)
    assert cited, f"a figure without its file in docs/measurements/: {paragraph.strip()[:120]}"
    for path in cited:
        assert (ROOT / path).is_file(), f"cited but missing: {path}"


def test_every_measurement_file_the_readme_names_exists() -> None:
    for path in _MEASUREMENT.findall(README.read_text()):
        assert (ROOT / path).is_file(), f"README.md names {path}, which does not exist"


def test_the_readme_says_where_it_has_not_run() -> None:
    assert "not yet run against a real cluster" in README.read_text()


def test_no_relative_sqlite_path_under_tmp() -> None:
    """`sqlite:///tmp/x.db` is the relative path tmp/x.db; /tmp takes four slashes."""
    for doc in DOCS:
        assert "sqlite:///tmp" not in doc.read_text(), f"{_rel(doc)}: use sqlite:////tmp/..."
