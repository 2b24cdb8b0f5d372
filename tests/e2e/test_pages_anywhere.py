"""Every admin page in Chromium, at a phone's width (390 px) and a desktop's (1280 px).

Against gunicorn and a fake provider, with jobs in each state (pending, generating,
completed with long unbroken text and many items, failed, cancelled), the tokens, usage and
exports pages, and an error page: no page scrolls sideways, none shows a program's internals,
the skip link is the first thing Tab reaches, every control and player has a name a screen
reader can say, text meets WCAG AA contrast, the favicon loads, and the "Generation started"
message leaves once the run has ended. Each page's screenshot goes to
$SPEECHBATCH_SCREENSHOT_DIR as PAGE-WIDTH.png.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
from playwright.sync_api import Browser, FloatRect, Page, expect

from tests.support.browser import DESKTOP, PHONE, SCREENSHOTS, fits, launch, new_tab, sign_in
from tests.support.fake_provider import FakeProvider
from tests.support.server import ApiClient, GunicornServer, app_env, bootstrap, cli, sqlite_url

pytestmark = pytest.mark.e2e

# Long enough that a call in flight outlives the module: a job stays GENERATING meanwhile.
FOREVER = 900.0
UNBROKEN = "Pneumonoultramicroscopicsilicovolcanoconiosis" * 40
LONG_TITLE = "Quarterly-announcements-for-every-platform-of-the-central-station-" * 2
INTERNALS = ("object at 0x", "built-in method", "Traceback")
# A screenshot shows the top of a long page: enough to see a hundred items' layout.
SHOT_MAX_HEIGHT = 1600

# A text's colour against the first opaque background behind it, as WCAG 2 defines the ratio.
CONTRAST_JS = """
(selector) => {
  function rgba(text) {
    const m = text.match(/rgba?\\(([^)]+)\\)/);
    const p = m[1].split(",").map(Number);
    return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 };
  }
  function luminance(c) {
    const lin = [c.r, c.g, c.b].map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
  }
  function background(node) {
    for (let n = node; n; n = n.parentElement) {
      const c = rgba(getComputedStyle(n).backgroundColor);
      if (c.a > 0) return c;
    }
    return { r: 255, g: 255, b: 255, a: 1 };
  }
  function visible(node) {
    const box = node.getBoundingClientRect();
    return box.width > 0 && box.height > 0 && getComputedStyle(node).visibility !== "hidden";
  }
  const found = [];
  for (const node of document.querySelectorAll(selector)) {
    const own = Array.from(node.childNodes).some(
      (c) => c.nodeType === Node.TEXT_NODE && c.textContent.trim());
    // Disabled controls are exempt from the contrast rule (WCAG 1.4.3, "inactive").
    if (!own || !visible(node) || node.closest(":disabled")) continue;
    const style = getComputedStyle(node);
    const fg = rgba(style.color), bg = background(node);
    const l1 = luminance(fg), l2 = luminance(bg);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const size = parseFloat(style.fontSize), bold = parseInt(style.fontWeight, 10) >= 700;
    const large = size >= 24 || (bold && size >= 18.66);
    found.push({
      text: node.textContent.trim().slice(0, 40), tag: node.tagName,
      cls: node.className, ratio: Math.round(ratio * 100) / 100, need: large ? 3 : 4.5,
    });
  }
  return found;
}
"""

# Every control and player that has no name a screen reader could say.
UNNAMED_JS = """
() => {
  function named(node) {
    if ((node.getAttribute("aria-label") || "").trim()) return true;
    const by = node.getAttribute("aria-labelledby");
    if (by && by.split(/\\s+/).some((id) => (document.getElementById(id) || {}).textContent))
      return true;
    if (node.labels && Array.from(node.labels).some((l) => l.textContent.trim())) return true;
    if (node.matches("a, button, summary") && node.textContent.trim()) return true;
    return node.matches("input[type=submit], input[type=button]") && !!node.value;
  }
  const controls = "a[href], button, input:not([type=hidden]), select, textarea, audio";
  return Array.from(document.querySelectorAll(controls))
    .filter((node) => !named(node))
    .map((node) => node.outerHTML.slice(0, 120));
}
"""


# The first element the Tab key can reach, in document order.
FIRST_FOCUSABLE_JS = """
() => {
  const node = document.querySelector(
    "a[href], button:not(:disabled), input:not([type=hidden]), select, textarea, [tabindex='0']");
  return node ? node.className + " " + (node.getAttribute("href") || "") : null;
}
"""


@dataclass
class Site:
    """The server under test, its fake provider, an API client and a job of each state."""

    server: GunicornServer
    fake: FakeProvider
    api: ApiClient
    jobs: dict[str, int] = field(default_factory=dict)

    def hold_a_run(self, job_id: int, *, cancel: bool = False) -> None:
        """Start a run whose calls hang in the fake provider (and cancel it, if asked)."""
        hanging = self.fake.in_flight() + 2  # ITEM_CONCURRENCY
        self.fake.latency = FOREVER
        try:
            assert self.api.generate(job_id).status_code == 202
            self.api.wait_for(lambda: self.fake.in_flight() == hanging, timeout=20)
        finally:
            self.fake.latency = 0.0
        if cancel:
            assert self.api.request("POST", f"/api/jobs/{job_id}/cancel").status_code == 200


def finished(job: dict[str, Any]) -> bool:
    """Whether the job's run has ended."""
    return bool(job["status"] in ("COMPLETED", "FAILED"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """gunicorn on SQLite with a fake provider, and a job in every state."""
    tmp = tmp_path_factory.mktemp("pages-anywhere")
    with FakeProvider(latency=0.0, api_key="test-key") as fake:
        env = app_env(
            sqlite_url(tmp), fake.url, tmp / "audio",
            TTS_TIMEOUT_SECONDS=FOREVER / 2, TTS_MAX_ATTEMPTS=1, LEASE_SECONDS=FOREVER * 2,
            ITEM_CONCURRENCY=2, WORKER_DEAD_SECONDS=60, TTS_PRICE_PER_MILLION_CHARACTERS=15,
        )  # fmt: skip
        token = bootstrap(env)
        cli(env, "set-budget", "--org", "acme", "--characters", "250000")
        server = GunicornServer(env, tmp, workers=1, threads=4, name="pages-anywhere").start()
        site = Site(server, fake, ApiClient(server.base_url, token))
        try:
            make_jobs(site)
            yield site
        finally:
            fake.latency = 0.0
            server.stop(graceful=False)


def make_jobs(site: Site) -> None:
    """A job in each state; the long one has unbroken words and more items than a page."""
    api = site.api
    texts = [
        f"Line {n}: the next train to the airport leaves from platform {n}." for n in range(120)
    ]
    texts[1] = UNBROKEN
    texts[4] = " ".join([UNBROKEN[:300]] * 6)
    site.jobs["completed"] = api.create_job(texts, title=LONG_TITLE)["id"]
    site.jobs["failed"] = api.create_job(["Mind the gap.", "Stand back."], title="Failed")["id"]
    site.jobs["cancelled"] = api.create_job(["One.", "Two.", "Three."], title="Cancelled")["id"]
    site.jobs["generating"] = api.create_job(["Uno.", "Dos.", "Tres."], title="Generating")["id"]
    site.jobs["pending"] = api.create_job(["Hello.", UNBROKEN[:900]], title="Pending")["id"]
    assert api.generate(site.jobs["completed"]).status_code == 202
    api.wait_job(site.jobs["completed"], finished, timeout=60, what="completed")
    site.fake.fail_next(1, 400, message="the voice cannot say this")
    assert api.generate(site.jobs["failed"]).status_code == 202
    api.wait_job(site.jobs["failed"], lambda j: j["status"] == "FAILED", timeout=30)
    site.hold_a_run(site.jobs["cancelled"], cancel=True)
    site.hold_a_run(site.jobs["generating"])
    assert api.request("POST", "/api/exports").status_code == 202


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium."""
    with launch() as chromium:
        yield chromium


def signed_in(browser: Browser, site: Site, width: int) -> Iterator[Page]:
    """A signed-in tab ``width`` pixels wide."""
    for tab in new_tab(browser, site.server.base_url, width):
        sign_in(tab)
        yield tab


def pages_of(site: Site) -> dict[str, str]:
    """Every page a signed-in admin can see, by screenshot name."""
    jobs = {f"job-{state}": f"/jobs/{job_id}" for state, job_id in site.jobs.items()}
    return {
        "jobs": "/",
        "new-job": "/jobs/new",
        **jobs,
        "job-items-page-2": f"/jobs/{site.jobs['completed']}?page=2",
        "tokens": "/tokens",
        "usage": "/usage",
        "exports": "/exports",
        "not-found": "/jobs/999999",
    }


def check_page(page: Page, name: str, width: int) -> list[str]:
    """What is wrong with the page on screen, in words (empty when nothing)."""
    problems = []
    text = page.content()
    problems += [f"{name}: shows {word!r}" for word in INTERNALS if word in text]
    if not fits(page):
        wide = page.evaluate("document.documentElement.scrollWidth")
        problems.append(f"{name} at {width} px scrolls sideways ({wide} px wide)")
    problems += [f"{name}: unnamed {html}" for html in page.evaluate(UNNAMED_JS)]
    for found in page.evaluate(CONTRAST_JS, "body *"):
        if found["ratio"] < found["need"]:
            problems.append(f"{name}: contrast {found}")
    first = page.evaluate(FIRST_FOCUSABLE_JS)
    if first != "skip-link #main":
        problems.append(f"{name}: the first focusable element is {first!r}, not the skip link")
    height = min(SHOT_MAX_HEIGHT, page.evaluate("document.documentElement.scrollHeight"))
    clip: FloatRect = {"x": 0, "y": 0, "width": width, "height": height}
    page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"), full_page=True, clip=clip)
    return problems


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_every_page_fits_names_its_controls_and_reads_well(
    browser: Browser, site: Site, width: int
) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    for tab in new_tab(browser, site.server.base_url, width):
        tab.goto("/login")
        problems += check_page(tab, "login", width)
        sign_in(tab)
        for name, path in pages_of(site).items():
            tab.goto(path)
            problems += check_page(tab, name, width)
        tab.goto("/jobs/new")
        tab.click("button:has-text('Create job')")
        problems += check_page(tab, "new-job-invalid", width)
    assert not problems, "\n".join(problems)


def test_the_nav_is_usable_on_a_phone(browser: Browser, site: Site) -> None:
    for tab in signed_in(browser, site, PHONE):
        for link in ("Jobs", "New job", "Exports", "Usage", "API tokens"):
            target = tab.locator("nav[aria-label=Main]").get_by_role("link", name=link)
            expect(target).to_be_in_viewport()
            box = target.bounding_box()
            assert box and box["height"] >= 24 and box["x"] + box["width"] <= PHONE, link
        tab.locator("nav[aria-label=Main]").get_by_role("link", name="Usage").tap()
        expect(tab.locator("h1")).to_contain_text("Usage")
        expect(tab.get_by_role("button", name="Sign out")).to_be_in_viewport()


def test_the_skip_link_moves_focus_to_the_main_content(browser: Browser, site: Site) -> None:
    for tab in signed_in(browser, site, DESKTOP):
        tab.keyboard.press("Tab")
        skip = tab.locator(".skip-link")
        expect(skip).to_be_focused()
        expect(skip).to_be_in_viewport()
        expect(skip).to_have_text("Skip to main content")
        tab.keyboard.press("Enter")
        expect(tab.locator("main#main")).to_be_focused()


def test_status_pills_meet_aa_contrast(browser: Browser, site: Site) -> None:
    ratios: dict[str, float] = {}
    for tab in signed_in(browser, site, DESKTOP):
        for path in ("/", f"/jobs/{site.jobs['failed']}", f"/jobs/{site.jobs['cancelled']}"):
            tab.goto(path)
            for found in tab.evaluate(CONTRAST_JS, ".badge"):
                ratios[found["cls"]] = min(found["ratio"], ratios.get(found["cls"], 99.0))
    seen = {cls.split()[-1] for cls in ratios}
    assert {"badge-completed", "badge-failed", "badge-pending", "badge-generating"} <= seen
    assert {"badge-done", "badge-error", "badge-cancelled"} <= seen
    assert all(ratio >= 4.5 for ratio in ratios.values()), ratios


def test_players_are_named_after_their_item(browser: Browser, site: Site) -> None:
    for tab in signed_in(browser, site, DESKTOP):
        tab.goto(f"/jobs/{site.jobs['completed']}")
        players = tab.locator("#items audio")
        expect(players).to_have_count(100)
        expect(players.first).to_have_attribute("aria-label", "Audio of item 1")


def test_the_favicon_is_linked_and_served(browser: Browser, site: Site) -> None:
    base = site.server.base_url
    for tab in signed_in(browser, site, DESKTOP):
        icon = tab.locator("link[rel=icon]")
        expect(icon).to_have_attribute("type", "image/svg+xml")
        href = str(icon.get_attribute("href"))
        answer = requests.get(base + href, timeout=5)
        assert answer.status_code == 200
        assert answer.headers["Content-Type"].startswith("image/svg+xml")
    legacy = requests.get(base + "/favicon.ico", timeout=5)
    assert legacy.status_code == 200 and legacy.headers["Content-Type"].startswith("image/")


def test_generation_started_leaves_once_the_run_ends(browser: Browser, site: Site) -> None:
    job_id = site.api.create_job(["Platform one.", "Platform two."], title="Watched")["id"]
    site.fake.latency = 2.0
    try:
        for tab in signed_in(browser, site, DESKTOP):
            tab.goto(f"/jobs/{job_id}")
            tab.click("#btn-generate")
            started = tab.locator(".flash", has_text="Generation started (run 1)")
            expect(started).to_be_visible()
            expect(tab.locator("#job-status")).to_have_text("COMPLETED", timeout=30_000)
            expect(started).to_have_count(0)
    finally:
        site.fake.latency = 0.0
