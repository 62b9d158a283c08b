"""A real browser for the tests: Debian's chromium driven by Playwright.

Playwright's async API needs asyncio and these tests run under trio, so a
scenario is a plain function run in a worker thread with Playwright's sync
API (:func:`in_browser`). From there it reaches the node's REST API through
the test's own async helpers with :func:`call` (``trio.from_thread.run``).

Rules, as a person using assistive technology would meet the page: controls
are found by role and accessible name; waits are on what the page shows
(Playwright's auto-waiting locators and ``expect``), never on sleeps; every
page must end without an uncaught error and without a CSP violation.

Chromium missing: the tests are skipped, unless ``MESH_REQUIRE_BROWSER=1``
(CI), then they fail. ``MESH_SCREENSHOTS=<folder>`` keeps the screenshots
the tests take (``docs/web.md`` shows them).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import os
import queue
import re
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import trio

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

CHROMIUM = os.environ.get("MESH_CHROMIUM", "/usr/bin/chromium")
REQUIRED = os.environ.get("MESH_REQUIRE_BROWSER") == "1"
SCREENSHOTS = os.environ.get("MESH_SCREENSHOTS")
#: as the machine's own probe starts it: no sandbox (root), no GPU, and no
#: background connections (the network is closed; they would only fail)
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "correct horse battery"
T = TypeVar("T")

#: records the page's CSP violations where the test can read them
_CSP_WATCH = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(e.violatedDirective + " " + e.blockedURI);
});
"""


def browser_problem() -> str | None:
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"no chromium at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    return None


def require_browser() -> None:
    """Skip (or, with MESH_REQUIRE_BROWSER=1, fail) without chromium and
    playwright. Called from a plain fixture (``browser_ready`` in
    ``tests/conftest.py``), so the skip's reason reaches the report (raised
    from inside the trio test it would arrive wrapped in an exception group)."""
    problem = browser_problem()
    if problem is not None:
        if REQUIRED:
            pytest.fail(f"MESH_REQUIRE_BROWSER=1 but {problem}")
        pytest.skip(problem)


async def in_browser(scenario: Callable[..., T], *args: Any, timeout: float = 120) -> T:
    """Run *scenario* (blocking, Playwright's sync API) in the browser's
    thread (:class:`_BrowserThread`); like a worker thread's, its run is
    waited for even when cancelled."""
    with trio.fail_after(timeout):
        return await _BrowserThread.get().run(scenario, args)


def call(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """From a scenario's thread: run an async helper in the test's trio loop."""
    return trio.from_thread.run(fn, *args, trio_token=_BrowserThread.token())


def call_sync(fn: Callable[..., T], *args: Any) -> T:
    """From a scenario's thread: run a plain function in the test's trio loop."""
    return trio.from_thread.run_sync(fn, *args, trio_token=_BrowserThread.token())


class _BrowserThread:
    """The thread every scenario runs in, one for the test session.

    Playwright's sync API keeps to the thread that started it, so the one
    chromium a session starts (:func:`chromium`: ~1 s a test otherwise) is
    driven from this thread alone. Each scenario still has a browser of its
    own in all that a page can tell: every context it opened (a
    :class:`Person`'s storage, cookies and cache) is closed when its
    ``with chromium()`` ends, and a browser that failed to close one, or
    went away, is replaced by a new one."""

    _lock = threading.Lock()
    _running: _BrowserThread | None = None
    _local = threading.local()

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.playwright: Any = None
        self.browser: Browser | None = None
        self.thread = threading.Thread(target=self._work, name="mesh-browser", daemon=True)
        self.thread.start()
        atexit.register(self.stop)

    @classmethod
    def get(cls) -> _BrowserThread:
        with cls._lock:
            if cls._running is None:
                cls._running = cls()
            return cls._running

    @classmethod
    def current(cls) -> _BrowserThread | None:
        """The browser's thread, when called from it."""
        running = cls._running
        if running is not None and threading.current_thread() is running.thread:
            return running
        return None

    @classmethod
    def token(cls) -> trio.lowlevel.TrioToken | None:
        """The trio loop of the test whose scenario runs (``None`` in a
        worker thread of trio's own, which knows it)."""
        token: trio.lowlevel.TrioToken | None = getattr(cls._local, "token", None)
        return token

    async def run(self, scenario: Callable[..., T], args: tuple[Any, ...]) -> T:
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        token = trio.lowlevel.current_trio_token()

        def job() -> None:
            self._local.token = token
            people: list[Person] = []
            self._local.people = people
            try:
                done.set_result(scenario(*args))
            except BaseException as error:
                # what the pages said meanwhile: why a page did not do what
                # was waited for is often there (an uncaught error)
                for person in people:
                    if person.errors or person.console_errors:
                        error.add_note(
                            f"page of {person.base_url}: errors {person.errors}, "
                            f"console errors {person.console_errors}"
                        )
                done.set_exception(error)
            finally:
                self._local.token = None
                self._local.people = None

        self.jobs.put(job)
        return await trio.to_thread.run_sync(done.result)

    def _work(self) -> None:
        try:
            while (job := self.jobs.get()) is not None:
                job()
        finally:
            self._close_browser()
            if self.playwright is not None:
                with contextlib.suppress(Exception):
                    self.playwright.stop()

    def stop(self) -> None:
        self.jobs.put(None)
        self.thread.join(timeout=30)

    def open_browser(self) -> Browser:
        """The session's chromium, started (again) if need be."""
        if self.browser is None or not self.browser.is_connected():
            self._close_browser()
            if self.playwright is None:
                from playwright.sync_api import sync_playwright

                self.playwright = sync_playwright().start()
            self.browser = self.playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        return self.browser

    def close_contexts(self) -> None:
        """Close what a scenario opened; a browser that fails to is replaced."""
        if self.browser is None:
            return
        try:
            for context in self.browser.contexts:
                context.close()
        except Exception:
            self._close_browser()

    def _close_browser(self) -> None:
        if self.browser is not None:
            with contextlib.suppress(Exception):
                self.browser.close()
            self.browser = None


@contextmanager
def chromium() -> Iterator[Browser]:
    """A chromium for one scenario: the session's, in the browser's thread
    (every context opened in it closed at the end), else one of its own."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)
    shared = _BrowserThread.current()
    if shared is not None:
        try:
            yield shared.open_browser()
        finally:
            shared.close_contexts()
        return
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def until(person: Person, condition: Callable[[], bool], timeout: float = 15) -> None:
    """Let the page run (its events reach the test's handlers) until
    *condition* holds: for what the page does not show, such as a request
    a route handler holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        person.page.wait_for_timeout(20)


def shot(page: Page, name: str) -> None:
    """A screenshot for the docs, kept when ``MESH_SCREENSHOTS`` names a folder."""
    if SCREENSHOTS:
        folder = Path(SCREENSHOTS)
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / f"{name}.png"))


class Person:
    """One person at one browser window (its own context: storage, cookies)."""

    def __init__(
        self,
        browser: Browser,
        base_url: str,
        *,
        width: int = 1280,
        height: int = 800,
        color_scheme: str = "light",
    ) -> None:
        self.base_url = base_url
        self.context = browser.new_context(
            viewport={"width": width, "height": height},
            color_scheme=color_scheme,  # type: ignore[arg-type]
            reduced_motion="reduce",
        )
        self.context.set_default_timeout(15_000)
        self.context.add_init_script(_CSP_WATCH)
        self.page = self.context.new_page()
        # (the scenario's people: their errors join a failure's report)
        people = getattr(_BrowserThread._local, "people", None)
        if people is not None:
            people.append(self)
        self.errors: list[str] = []
        self.console_errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on(
            "console",
            lambda m: self.console_errors.append(m.text) if m.type == "error" else None,
        )
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("dialog", self._dialog)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    # finding things ------------------------------------------------------------

    def button(self, name: str | re.Pattern[str], **kw: Any) -> Locator:
        return self.page.get_by_role("button", name=name, exact=kw.pop("exact", True), **kw)

    def textbox(self, name: str | re.Pattern[str], **kw: Any) -> Locator:
        return self.page.get_by_role("textbox", name=name, exact=kw.pop("exact", True), **kw)

    def heading(self, name: str | re.Pattern[str], **kw: Any) -> Locator:
        return self.page.get_by_role("heading", name=name, exact=kw.pop("exact", True), **kw)

    def room_link(self, name: str) -> Locator:
        """A joined room in the sidebar (its name, then its counts)."""
        nav = self.page.get_by_role("navigation", name="Rooms and people")
        return nav.get_by_role("link", name=re.compile(rf"^{re.escape(name)}(,|$)"))

    def message(self, text: str, *, within: Locator | None = None) -> Locator:
        """The message (an article) whose text contains *text*."""
        scope = within if within is not None else self.timeline
        return scope.get_by_role("article").filter(has_text=text)

    @property
    def timeline(self) -> Locator:
        return self.page.get_by_role("main", name="Conversation").get_by_role("log")

    @property
    def composer(self) -> Locator:
        return self.page.get_by_role("main", name="Conversation").get_by_role(
            "textbox", name=re.compile(r"^Message ")
        )

    # doing things ----------------------------------------------------------------

    def open(self) -> None:
        self.page.goto(self.base_url + "/")

    def set_up(self, name: str, mesh_name: str, **choices: str) -> None:
        from playwright.sync_api import expect

        self.open()
        expect(self.heading("Set up your mesh")).to_be_visible()
        self.textbox("Your name").fill(name)
        self.textbox("Password").fill(PASSWORD)
        self.textbox("Mesh name").fill(mesh_name)
        for label in choices.values():
            self.page.get_by_role("radio", name=label).check()
        self.button("Create mesh").click()
        expect(self.heading("#Town Square")).to_be_visible()

    def sign_in(self, name: str, password: str = PASSWORD) -> None:
        from playwright.sync_api import expect

        expect(self.heading("Sign in")).to_be_visible()
        self.textbox("Name").fill(name)
        self.textbox("Password").fill(password)
        self.button("Sign in").click()
        expect(self.button("Sign out")).to_be_visible()

    def register(self, name: str, password: str = PASSWORD) -> None:
        from playwright.sync_api import expect

        self.button("Create an account").click()
        expect(self.heading("Create an account")).to_be_visible()
        self.textbox("Choose a name").fill(name)
        self.textbox("Choose a password").fill(password)
        self.button("Create account").click()
        expect(self.button("Sign out")).to_be_visible()

    def join_default_room(self) -> None:
        from playwright.sync_api import expect

        self.button("Join Town Square").click()
        expect(self.heading("#Town Square")).to_be_visible()

    def open_room(self, name: str) -> None:
        from playwright.sync_api import expect

        self.room_link(name).click()
        expect(self.heading(f"#{name}")).to_be_visible()

    def send(self, text: str) -> Locator:
        """Type *text* and press Enter; the message as it shows in the timeline."""
        self.composer.fill(text)
        self.composer.press("Enter")
        return self.message(text.splitlines()[0])

    def token(self) -> str | None:
        token: str | None = self.page.evaluate("() => localStorage.getItem('mesh.token')")
        return token

    def csp_violations(self) -> list[str]:
        violations: list[str] = self.page.evaluate("() => window.__cspViolations || []")
        return violations

    def assert_clean(self, *, console: bool = True) -> None:
        """No uncaught error, no CSP violation, no dialog (and, unless the
        test provoked failures on purpose, no console error)."""
        assert self.errors == [], self.errors
        assert self.csp_violations() == [], self.csp_violations()
        assert self.dialogs == [], self.dialogs
        if console:
            assert self.console_errors == [], self.console_errors

    def close(self) -> None:
        self.context.close()
