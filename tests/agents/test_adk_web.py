"""`adk web maxkernel/apps` in headless Chromium, driven over the DevTools protocol as a person would."""

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from _extras import need_binary
from _servers import adk_server

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True, scope="module")
def _chromium():
    need_binary(str(CHROMIUM), package="chromium")


# The first visible element matching a CSS selector (and holding `text`), as its centre point.
_FIND = """(() => {
  for (const el of document.querySelectorAll(%s)) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.height > 0 && el.innerText.includes(%s)) return [r.x + r.width / 2, r.y + r.height / 2];
  }
  return null;
})()"""


class Browser:
    """Headless Chromium with a fresh profile; one page driven through the DevTools protocol."""

    def __init__(self, shots: Path):
        from websockets.sync.client import connect

        self.shots, self._n = shots, 0
        self.profile = tempfile.mkdtemp(prefix="mk-chromium-")
        # Loopback only: every other host name fails at once (the page asks for web fonts).
        self.proc = subprocess.Popen(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={self.profile}", "--remote-debugging-port=0", "--window-size=1400,900",
             "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            port_file = Path(self.profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("Chromium did not open its DevTools port")
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                page = next(t for t in json.loads(r.read()) if t["type"] == "page")
            self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
            self._id = 0
            self.send("Page.enable")
        except BaseException:
            self.close()
            raise

    def send(self, method: str, **params):
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:  # events arrive in between; only our answer counts
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def js(self, expression: str):
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expression: str, timeout: float = 30, what: str = ""):
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or expression}; "
                                     f"screenshot {self.screenshot('timeout')}")
            time.sleep(0.2)

    def has(self, selector: str, text: str = "") -> bool:
        return self.js(_FIND % (json.dumps(selector), json.dumps(text))) is not None

    def click(self, selector: str, text: str = "", timeout: float = 15):
        """A real mouse click at the centre of the element, once it is visible."""
        x, y = self.wait(_FIND % (json.dumps(selector), json.dumps(text)), timeout, f"{selector} {text!r}")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def type(self, text: str, enter: bool = False):
        if text:
            self.send("Input.insertText", text=text)
        if enter:
            key = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13}
            self.send("Input.dispatchKeyEvent", type="keyDown", text="\r", **key)
            self.send("Input.dispatchKeyEvent", type="keyUp", **key)

    def texts(self, selector: str) -> list[str]:
        return self.js(f"[...document.querySelectorAll({json.dumps(selector)})].map(e => e.innerText.trim())")

    def screenshot(self, name: str) -> Path:
        self._n += 1
        path = self.shots / f"{self._n:02d}_{name}.png"
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self):
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture
def web(tmp_path):
    # A home of its own: the UI's telemetry answer is written to ~/.adk/config.json.
    home = tmp_path / "home"
    home.mkdir()
    with adk_server("web", tmp_path / "data", env={"HOME": str(home)}) as srv:
        yield srv


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path)
    try:
        yield b
    finally:
        b.close()


def send_message(browser: Browser, text: str, tries: int = 3):
    """Type into the chat box and press Enter, as a person does: again if the page, still loading the
    app, cleared the box before the message left."""
    sent = ("[...document.querySelectorAll('.content-bubble.role-user')]"
            f".some(e => e.innerText.trim() === {json.dumps(text)})")
    for _ in range(tries):
        browser.click("textarea.chat-input-box", timeout=30)
        browser.js("document.querySelector('textarea.chat-input-box').select()")
        browser.type(text)
        if browser.js("document.querySelector('textarea.chat-input-box').value") == text:
            browser.type("", enter=True)
            try:
                return browser.wait(sent, 10, "the message in the chat")
            except AssertionError:
                pass
        time.sleep(1)
    raise AssertionError(f"the chat never took the message; screenshot {browser.screenshot('not_sent')}")


def test_web_ui_lists_both_apps_and_completes_a_chat_turn(web, browser):
    browser.send("Page.navigate", url=f"{web.url}/dev-ui/")
    browser.wait("document.querySelector('.selector-button') !== null", 60, "the app selector")
    # A first visit asks about usage statistics; a person says no.
    time.sleep(1.0)
    if browser.has("button", "No Thanks"):
        browser.click("button", "No Thanks")
    browser.click(".selector-button")
    browser.wait("document.querySelectorAll('.app-selector-item-name').length >= 2", 30, "the apps list")
    assert {"auto", "hitl"} <= set(browser.texts(".app-selector-item-name"))
    browser.screenshot("apps")

    browser.click(".app-selector-item-name", "hitl")
    send_message(browser, "hello")
    reply = browser.wait("[...document.querySelectorAll('.content-bubble.role-bot')]"
                         ".map(e => e.innerText).find(t => t.includes('[replay]'))", 60, "the replay's reply")
    shot = browser.screenshot("reply")
    assert "Tell me the task" in reply, f"unexpected reply {reply!r}; screenshot {shot}"

    # The turn went through the server into its SQLite store.
    (session,) = web.get("/apps/hitl/users/user/sessions")
    full = web.get(f"/apps/hitl/users/user/sessions/{session['id']}")
    said = [p.get("text", "") for e in full["events"] for p in (e.get("content") or {}).get("parts", [])]
    assert "hello" in said and any("[replay]" in t for t in said)
