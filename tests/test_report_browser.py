"""report.html opened in a real browser: headless Chromium driven over the DevTools protocol.

Chromium is Debian's package (``make browser`` installs it when run as root); the
protocol client is a few lines over ``websocket-client``.  The page must load without
a console error or an uncaught exception, show the header card with the run's
iteration time, and have every image decoded (``naturalWidth > 0``).  A screenshot of
the whole page is saved as ``reports/report_screenshot.png`` for people to look at.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from clustersim.cli import main
from clustersim.units import format_time

from .conftest import SCENARIOS

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "reports" / "report_screenshot.png"
SCENARIO = SCENARIOS / "pipeline" / "1f1b_m8.yaml"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
TIMEOUT_S = 60.0


def chromium() -> str | None:
    """The browser: ``$CLUSTERSIM_CHROMIUM``, else the first of CHROMIUM_NAMES on PATH."""
    given = os.environ.get("CLUSTERSIM_CHROMIUM")
    return given or next((p for n in CHROMIUM_NAMES if (p := shutil.which(n))), None)


class DevTools:
    """The smallest DevTools protocol client: commands by id, events kept in order."""

    def __init__(self, ws_url: str) -> None:
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=TIMEOUT_S, suppress_origin=True)
        self.events: list[dict[str, Any]] = []
        self.next_id = 0

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                assert "error" not in message, (method, message["error"])
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            found = [e for e in self.events if e.get("method") == method]
            if found:
                return found[0]
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(method)

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, failed assertions, uncaught exceptions and error log entries."""
        out = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append(json.dumps(params.get("args")))
            elif method == "Runtime.exceptionThrown":
                out.append(json.dumps(params.get("exceptionDetails")))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                out.append(params["entry"].get("text", ""))
        return out


@pytest.fixture
def browser(tmp_path):
    """A headless Chromium with remote debugging on a free port; stopped by its own PID."""
    path = chromium()
    if path is None:
        pytest.skip(
            "chromium not found on PATH (nor $CLUSTERSIM_CHROMIUM): on Debian "
            "`apt-get install chromium`, which `make browser` runs as root"
        )
    profile = tmp_path / "profile"
    args = [
        path,
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace sandbox
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--allow-file-access-from-files",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + TIMEOUT_S
        while not port_file.exists() or not port_file.read_text().strip():
            assert proc.poll() is None, f"{path} exited with {proc.returncode}"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        client = DevTools(pages[0]["webSocketDebuggerUrl"])
        yield client
        client.ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_report_opens_in_chromium_without_errors(tmp_path, capsys, browser: DevTools) -> None:
    run = tmp_path / "run"
    assert main(["run", str(SCENARIO), "-o", str(run), "-q"]) == 0
    assert main(["report", str(run)]) == 0
    capsys.readouterr()
    summary = json.loads((run / "summary.json").read_text())
    for domain in ("Runtime", "Log", "Page"):
        browser.send(f"{domain}.enable")
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        width=1400,
        height=900,
        deviceScaleFactor=1,
        mobile=False,
    )
    browser.send("Page.navigate", url=(run / "report.html").as_uri())
    browser.wait_for("Page.loadEventFired")

    card = browser.evaluate("document.getElementById('header-card').innerText")
    assert format_time(summary["iteration_time_s"]) in card and "iteration time" in card
    images = browser.evaluate(
        "Array.from(document.images).map(i => [i.id, i.complete, i.naturalWidth])"
    )
    assert "gantt-image" in [i[0] for i in images]
    assert all(complete and width > 0 for _, complete, width in images), images
    assert browser.evaluate("document.querySelectorAll('#devices tbody tr').length") > 0
    assert browser.errors() == []

    height = browser.evaluate("document.documentElement.scrollHeight")
    shot = browser.send(
        "Page.captureScreenshot",
        format="png",
        captureBeyondViewport=True,
        clip={"x": 0, "y": 0, "width": 1400, "height": min(height, 8000), "scale": 1},
    )
    png = base64.b64decode(shot["data"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    SCREENSHOT.parent.mkdir(exist_ok=True)
    SCREENSHOT.write_bytes(png)
