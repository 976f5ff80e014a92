"""report.html opened as a reader opens it: in a real browser (headless Chromium, Debian's
``chromium``), driven over the Chrome DevTools Protocol.

A string check of the HTML (test_render.py) cannot see a figure whose base64 does not decode, a
script error, a link to a file that is not there, or a page that scrolls sideways on a laptop;
the browser can. Each page must load with no console error and no uncaught exception, every
image decoded (naturalWidth > 0), every link to a local file pointing at a file that exists, no
horizontal scrolling at 1366 px, and the verdict above the fold. A full-page screenshot at that
width is kept in the test's tmp dir (and, with AUTOTUNE_SAVE_SCREENSHOT=1, the demo report's in
docs/demo-report/screenshot.png, for the README).

The protocol runs over ``--remote-debugging-pipe`` (fd 3 in, fd 4 out, JSON messages ended by
NUL): no port to pick or leak, no websocket library, no browser download. Every Chromium process
is started in its own process group with a fresh --user-data-dir and stopped by that group's id;
the test then checks that no process of that profile is left."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import html
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pydantic
import pytest

from autotune.report import document, markdown
from autotune.report.document import Figure
from autotune.report.html import render as render_html
from autotune.report.model import Report
from tests.support.waiting import until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
DEMO = ROOT / "docs" / "demo-report"
# A common laptop screen; HEIGHT is the viewport below a browser's toolbars: "above the fold".
WIDTH, HEIGHT = 1366, 768
CHROMIUM = shutil.which("chromium")
TIMEOUT = 60.0  # generous: the machine is shared; every wait is on a condition, never a sleep

# What the page reports about itself once loaded (evaluated in the page).
INSPECT = """(() => {
  const root = document.documentElement;
  const verdict = [...document.querySelectorAll('h2')]
      .find(h => h.textContent.startsWith('Verdict'));
  return {
    images: [...document.images].map(i => ({
      src: i.currentSrc.slice(0, 80), alt: i.alt, complete: i.complete,
      naturalWidth: i.naturalWidth, right: i.getBoundingClientRect().right})),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    scrollWidth: root.scrollWidth, clientWidth: root.clientWidth,
    tables: [...document.querySelectorAll('table')].map(t => ({
      header: t.rows[0].textContent.slice(0, 60), width: t.getBoundingClientRect().width,
      room: t.parentElement.clientWidth})),
    verdictBottom: verdict ? verdict.nextElementSibling.getBoundingClientRect().bottom
                              + window.scrollY : null,
  };
})()"""


@dataclass
class PageCheck:
    """What a page did while it loaded, and what it contains."""
    errors: list[str] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    broken_links: list[str] = field(default_factory=list)
    scroll_width: int = 0
    client_width: int = 0
    tables: list[dict[str, Any]] = field(default_factory=list)
    verdict_bottom: float | None = None

    @property
    def broken_images(self) -> list[dict[str, Any]]:
        return [i for i in self.images if i["naturalWidth"] == 0]


class Chromium:
    """One headless Chromium, spoken to over --remote-debugging-pipe."""

    def __init__(self, binary: str, profile: Path) -> None:
        self.profile = profile
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def pipes_on_3_and_4() -> None:
            # Chromium reads fd 3 and writes fd 4. Move both ends above 4 first, so that the
            # dup2 onto 3 cannot overwrite the other end when the OS handed out 3 or 4.
            r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        args = [binary, "--headless", "--remote-debugging-pipe", f"--user-data-dir={profile}",
                # root in a container: Chromium's sandbox needs user namespaces it may not get
                "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--mute-audio", f"--window-size={WIDTH},{HEIGHT}",
                "about:blank"]
        self.stderr = open(profile.parent / "chromium.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.stderr,
                                     stderr=self.stderr, preexec_fn=pipes_on_3_and_4,
                                     pass_fds=(3, 4), start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._events: list[dict[str, Any]] = []
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, name="cdp-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._from_browser, 1 << 16):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for m in messages:
                self._messages.put(json.loads(m))
        self._messages.put(None)  # the browser closed its end

    def _next(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        left = deadline - time.monotonic()
        try:
            message = self._messages.get(timeout=max(left, 0.0))
        except queue.Empty:
            raise AssertionError(f"Chromium: no {waiting_for} within {TIMEOUT:g}s") from None
        if message is None:
            raise AssertionError(f"Chromium closed the protocol pipe while we waited for "
                                 f"{waiting_for} (exit code {self.proc.poll()})")
        return message

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            command["sessionId"] = session
        os.write(self._to_browser, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT
        while True:
            message = self._next(deadline, f"answer to {method}")
            if message.get("id") != self._next_id:
                self._events.append(message)
                continue
            if "error" in message:
                raise AssertionError(f"{method}: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result

    def event(self, method: str, session: str) -> dict[str, Any]:
        """The first ``method`` event of ``session`` not yet taken, waiting for it."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            for e in self._events:
                if e.get("method") == method and e.get("sessionId") == session:
                    self._events.remove(e)
                    return e
            self._events.append(self._next(deadline, f"{method} event"))

    def events(self, session: str) -> list[dict[str, Any]]:
        return [e for e in self._events if e.get("sessionId") == session]

    def stop(self) -> None:
        """Stop the browser and every process it started: the process group, by its id."""
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.write(self._to_browser, json.dumps(
                        {"id": 0, "method": "Browser.close", "params": {}}).encode() + b"\0")
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=10)
            # Renderers, the GPU and utility processes, the zygote: still in the group even
            # when the browser process has exited.
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=TIMEOUT)
            # Every writer of the pipe is gone: the reader sees its end before we close it.
            self._reader.join(timeout=TIMEOUT)
        finally:
            for fd in (self._to_browser, self._from_browser):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.stderr.close()
        try:
            until(f"no process of the profile {self.profile} left",
                  lambda: not _processes_of(self.profile), TIMEOUT)
        except AssertionError:
            survivors = _processes_of(self.profile)
            for pid in survivors:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"Chromium processes outside its process group: {survivors}")\
                from None


def _processes_of(profile: Path) -> list[int]:
    """PIDs whose command line names ``profile`` (the browser and its children)."""
    marker = str(profile).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(entry.name))
    return found


def open_page(browser: Chromium, page: Path, screenshot: Path) -> PageCheck:
    """Load ``page`` in a fresh tab at WIDTH x HEIGHT, report what it did, and save a full-page
    screenshot."""
    target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.call("Target.attachToTarget",
                           {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log"):
        browser.call(f"{domain}.enable", session=session)
    browser.call("Emulation.setDeviceMetricsOverride",
                 {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
                 session=session)
    navigated = browser.call("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
    assert "errorText" not in navigated, navigated
    browser.event("Page.loadEventFired", session)

    def evaluate(expression: str) -> Any:
        answer = browser.call("Runtime.evaluate", {"expression": expression,
                                                   "returnByValue": True}, session=session)
        assert "exceptionDetails" not in answer, answer["exceptionDetails"]
        return answer["result"].get("value")

    # The page is ours (not the tab's about:blank) and loaded, and every image is done, decoded
    # or failed: images may still decode after the load event.
    url = page.resolve().as_uri()
    until(f"{page.name} loaded, every image decoded or failed", lambda: evaluate(
        f"location.href === {json.dumps(url)} && document.readyState === 'complete'"
        " && [...document.images].every(i => i.complete)"), TIMEOUT)
    facts = evaluate(INSPECT)
    check = PageCheck(images=facts["images"], scroll_width=facts["scrollWidth"],
                      client_width=facts["clientWidth"], tables=facts["tables"],
                      verdict_bottom=facts["verdictBottom"])
    for href in facts["links"]:
        url = urlparse(href)
        if url.scheme == "file" and not Path(unquote(url.path)).exists():
            check.broken_links.append(href)
    for e in browser.events(session):
        params = e.get("params", {})
        if e["method"] == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            check.errors.append("exception: " + details.get("exception", {}).get(
                "description", details.get("text", "")))
        elif e["method"] == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            check.errors.append("console." + params["type"] + ": " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif e["method"] == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            check.errors.append(f"log ({entry['source']}): {entry['text']} {entry.get('url', '')}")

    size = browser.call("Page.getLayoutMetrics", session=session)["cssContentSize"]
    shot = browser.call("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": WIDTH, "height": size["height"], "scale": 1}},
        session=session)
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    browser.call("Target.closeTarget", {"targetId": target})
    return check


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/ensure-tools.sh test installs it)")
    b = Chromium(CHROMIUM, tmp_path_factory.mktemp("chromium") / "profile")
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def simulated_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """report.html of the fastest real study: experiments/simulated.yaml, run by the CLI."""
    tmp = tmp_path_factory.mktemp("simulated")
    cli = [sys.executable, "-m", "autotune.cli"]
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_STORAGE"}
    storage = f"sqlite:///{tmp}/s.db"
    exp = str(ROOT / "experiments" / "simulated.yaml")
    for args in (["run", exp, "--storage", storage, "--plain"],
                 ["report", exp, "--storage", storage]):
        done = subprocess.run([*cli, *args], cwd=tmp, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"autotune {args[0]}: {done.stdout}\n{done.stderr}"
    return tmp / "results" / "simulated" / "report.html"


@pytest.fixture(scope="module")
def demo_today(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo study's report as today's renderer writes it: the committed report.json (every
    figure of that real local study) and its plots, through document.build and html.render.
    The committed report.html was written by the renderer of its day."""
    out = tmp_path_factory.mktemp("demo-today")
    report = pydantic.TypeAdapter(Report).validate_python(
        json.loads((DEMO / "report.json").read_text()))
    figures = {Path(file).stem: Figure(file, caption)
               for caption, file in _figures(DEMO / "report.md", nights=False)}
    blocks = document.build(report, figures)
    (out / "report.md").write_text(markdown.render(blocks))
    page = out / "report.html"
    page.write_text(render_html(blocks, f"autotune report: {report.experiment}",
                                lambda f: (DEMO / f).read_bytes()))
    return page


def _figures(md: Path, nights: bool = True) -> list[tuple[str, str]]:
    """(caption, file) of each figure of report.md; without ``nights``, of its own sections
    only: a report written before 2026-12-06 had its night-by-night section (nights.png) in
    report.md only, not in report.html."""
    text = md.read_text()
    if not nights:
        text = text.split("\n## Night by night\n")[0]
    return [(html.unescape(re.sub(r"\\(.)", r"\1", caption)), file) for caption, file in
            re.findall(r"^!\[(.*)\]\(([^)/]+\.png)\)$", text, re.MULTILINE)]


def _assert_loads(check: PageCheck, page: Path, shot: Path) -> None:
    """No error, every image decoded, every local link alive, every figure shown."""
    where = f"{page} (screenshot {shot})"
    assert not check.errors, f"{where}: console errors: {check.errors}"
    assert not check.broken_images, f"{where}: images that did not load: {check.broken_images}"
    assert not check.broken_links, f"{where}: links to missing files: {check.broken_links}"
    nights = "Night by night</h2>" in page.read_text()  # since 2026-12-06, in both files
    figures = _figures(page.parent / "report.md", nights=nights)
    assert figures, f"{where}: report.md has no figure"
    assert [i["alt"] for i in check.images] == [c for c, _ in figures], where


def _assert_laid_out(check: PageCheck, page: Path, shot: Path) -> None:
    """Readable on a laptop: the verdict and its reason on the first screen; no sideways
    scrolling; no plot and no table wider than the room it has."""
    where = f"{page} (screenshot {shot})"
    assert check.verdict_bottom is not None, f"{where}: no verdict"
    assert check.verdict_bottom <= HEIGHT, (
        f"{where}: the verdict ends at {check.verdict_bottom:.0f} px, below the fold ({HEIGHT})")
    assert check.scroll_width <= check.client_width, (
        f"{where}: the page scrolls sideways ({check.scroll_width} px > {check.client_width})")
    assert [i for i in check.images if i["right"] > check.client_width] == [], where
    assert [t for t in check.tables if t["width"] > t["room"] + 1] == [], where


def test_the_check_sees_what_a_reader_would(browser: Chromium, tmp_path: Path) -> None:
    """The browser check itself: a page with a script error, a console error, an image that does
    not decode and a link to a missing file is caught on each count."""
    page = tmp_path / "broken.html"
    (tmp_path / "here.html").write_text("<p>here</p>")
    page.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>t</title></head><body>"
        "<h2>Verdict: ADOPT</h2><p>reason</p>"
        "<img alt='broken' src='data:image/png;base64,AAAA'>"
        "<a href='missing.html'>gone</a> <a href='here.html'>here</a>"
        "<script>console.error('boom'); throw new Error('thrown');</script>"
        "</body></html>")
    check = open_page(browser, page, tmp_path / "broken.png")
    assert any("boom" in e for e in check.errors), check.errors
    assert any("thrown" in e for e in check.errors), check.errors
    assert [i["alt"] for i in check.broken_images] == ["broken"]
    assert check.broken_links == [(tmp_path / "missing.html").as_uri()]


def test_simulated_study_report_in_a_browser(browser: Chromium, simulated_report: Path,
                                             tmp_path: Path) -> None:
    shot = tmp_path / "simulated-report-1366.png"
    check = open_page(browser, simulated_report, shot)
    _assert_loads(check, simulated_report, shot)
    _assert_laid_out(check, simulated_report, shot)


def test_demo_report_in_a_browser(browser: Chromium, demo_today: Path, tmp_path: Path) -> None:
    """A real local study's report has what a simulated target has not: the Go scheduler's
    table, the scheduling-latency and GC-pause heat maps, the CPU breakdown. Today's rendering
    of it is checked in full; the committed one for what it carries (it is rewritten with
    docs/demo-report by `make demo`)."""
    committed = DEMO / "report.html"
    for page in (demo_today, committed):
        assert "Inside the Go scheduler" in page.read_text(), f"{page}: no scheduler section"
        assert all(f'alt="{kind}' in page.read_text() for kind in (
            "Scheduling latency", "Stop-the-world GC pauses", "Where the CPU went")), page
    shot = tmp_path / "demo-report-1366.png"
    check = open_page(browser, demo_today, shot)
    _assert_loads(check, demo_today, shot)
    _assert_laid_out(check, demo_today, shot)
    committed_shot = tmp_path / "demo-report-committed-1366.png"
    _assert_loads(open_page(browser, committed, committed_shot), committed, committed_shot)
    if os.environ.get("AUTOTUNE_SAVE_SCREENSHOT") == "1":
        # The committed report's own picture, so the two files in docs/ agree.
        shutil.copyfile(committed_shot, DEMO / "screenshot.png")
