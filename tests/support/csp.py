"""Watch a Playwright browser context for Content-Security-Policy violations.

Two witnesses: the page's ``securitypolicyviolation`` events (reported to Python through
an exposed function, so they survive navigations) and Chromium's console errors.
"""

from __future__ import annotations

from playwright.sync_api import BrowserContext, ConsoleMessage

LISTENER = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.__reportCspViolation(
    `${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${e.sourceFile}:${e.lineNumber}`
  );
});
"""


class CspWatch:
    """Collects every CSP violation seen in ``context`` (install before opening pages)."""

    def __init__(self, context: BrowserContext) -> None:
        self.violations: list[str] = []
        context.expose_function("__reportCspViolation", self._report)
        context.add_init_script(LISTENER)
        context.on("console", self._console)

    def _report(self, violation: str) -> None:
        self.violations.append(violation)

    def _console(self, message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            self.violations.append(f"console: {message.text}")
