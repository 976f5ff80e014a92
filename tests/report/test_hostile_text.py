"""Text a server wrote (a Prometheus error body, an API server's message) is shown in report.md
as exactly that text: it cannot end a table, forge a heading, embed HTML or make a viewer fetch
an image."""

from __future__ import annotations

from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

from autotune.experiment.models import Setting
from autotune.report import build_report, write_report
from autotune.report.markdown import text
from tests.report.builder import Builder, experiment, m

HOSTILE = ("query failed: 503 <html><body><script>alert(1)</script></body></html>\n"
           "# Verdict: ADOPT | forged | cell\n![pixel](http://198.51.100.7/track.png) "
           "[click](javascript:alert(2)) *strong* `code` ~~gone~~ &lt;tag&gt; _x_ 1. item")


def _tokens(md: str) -> list[Token]:
    out: list[Token] = []
    stack = MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(md)
    while stack:
        token = stack.pop(0)
        out.append(token)
        stack[:0] = token.children or []
    return out


def _shown(md: str) -> str:
    """The text a reader sees: every text and code token, in order."""
    return "".join(t.content for t in _tokens(md) if t.type in ("text", "code_inline"))


def test_a_server_body_in_a_reason_is_shown_verbatim_and_does_nothing(tmp_path: Path) -> None:
    b = Builder(experiment(), tmp_path)
    base: dict[str, Setting] = {"GOMAXPROCS": None, "GOGC": None}
    for i, p99 in enumerate((0.012, 0.013, 0.011), start=1):
        b.add("reference", "baseline", base, m(p99), repeat=i)
    b.add("search", "search", {"GOMAXPROCS": 2, "GOGC": 100}, m(0.010))
    b.add("search", "search", {"GOMAXPROCS": 4, "GOGC": 50}, None, failure=HOSTILE)
    out = tmp_path / "out"
    write_report(build_report(b.exp, b.studies), out, b.studies)
    md = (out / "report.md").read_text()

    tokens = _tokens(md)
    assert not [t for t in tokens if t.type in ("html_block", "html_inline")]
    assert not [t for t in tokens if t.type == "link_open"]
    images = [t.attrs.get("src") for t in tokens if t.type == "image"]
    assert all(isinstance(src, str) and src.endswith(".png") and "/" not in src
               for src in images), images
    headings = [t for t in tokens if t.type == "heading_open"]
    inline_after = [tokens[tokens.index(h) + 1].content for h in headings]
    assert not [h for h in inline_after if "forged" in h], inline_after
    formatted = [tokens[i + 1].content for i, t in enumerate(tokens[:-1])
                 if t.type in ("em_open", "strong_open", "s_open", "code_inline")]
    assert not [f for f in formatted if f in ("strong", "gone", "x")], formatted
    # Nothing lost: the reason is shown, newlines as spaces.
    assert " ".join(HOSTILE.splitlines()) in _shown(md)


def test_text_keeps_words_and_escapes_only_what_has_a_meaning() -> None:
    assert text("gc_pause_p99 >= 1.25 at 95% CI") == "gc_pause_p99 >= 1.25 at 95% CI"
    for hostile in (HOSTILE, "# heading", "> quote", "- item", "12) item", "a\\b", "<br>",
                    # review finding: up to three leading spaces keep a block's meaning
                    "   # Verdict: ADOPT", " - - -", "  > x", " 1. x", "    code"):
        shown = _shown(text(hostile))
        assert shown == " ".join(hostile.splitlines()).strip(), (hostile, shown)
        assert not [t for t in _tokens(text(hostile))
                    if t.type not in ("paragraph_open", "paragraph_close", "inline", "text",
                                      "softbreak")], hostile
