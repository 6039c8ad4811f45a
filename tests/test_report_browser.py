"""Reports render in headless Chromium: screenshot taken, no console error, every image loaded,
nothing fetched but local files.

Chromium is driven over the DevTools protocol with a small standard-library WebSocket
client, so the test needs the browser (Debian: `apt-get install -y chromium`) and no
Python package or browser download. Skipped, saying why, where Chromium is not installed;
test_report_html.py checks the same pages' structure and images without a browser.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.test_report_support import write_realistic_run, write_realistic_sweep

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--remote-debugging-port=0", "--window-size=1280,900")


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if path := shutil.which(name):
            return path
    return None


class WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: masked text frames out,
    unmasked (possibly fragmented) text frames in, pings answered."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        parts = urlparse(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout_s)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
            f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode())
        response = b""
        while b"\r\n\r\n" not in response:
            response += self.sock.recv(1)
        if b" 101 " not in response.split(b"\r\n")[0]:
            raise ConnectionError(f"websocket handshake failed: {response[:200]!r}")

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("websocket closed")
            data += chunk
        return data

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 2**16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, text: str) -> None:
        self._send_frame(0x1, text.encode())

    def recv(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            n = second & 0x7F
            if n == 126:
                (n,) = struct.unpack(">H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack(">Q", self._read(8))
            payload = self._read(n)
            opcode = first & 0x0F
            if opcode == 0x9:  # ping
                self._send_frame(0xA, payload)
                continue
            if opcode == 0x8:
                raise ConnectionError("websocket closed by the browser")
            message += payload
            if first & 0x80:
                return message.decode()

    def close(self) -> None:
        self.sock.close()


class Page:
    """One Chromium tab over the DevTools protocol, recording the events it sees."""

    def __init__(self, ws_url: str) -> None:
        self.ws = WebSocket(ws_url)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, event: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(e.get("method") == event for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {event} in {timeout_s} s")
            self.events.append(json.loads(self.ws.recv()))

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads seen so far."""
        found = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(f"console: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                found.append(f"exception: {params.get('exceptionDetails', {}).get('text')}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"log: {params['entry'].get('text')} {params['entry'].get('url')}")
            elif method == "Network.loadingFailed":
                found.append(f"load failed: {params.get('errorText')}")
        return found

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent"]

    def screenshot(self) -> bytes:
        """The whole page, not just the viewport."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.call("Page.captureScreenshot", format="png", clip=clip,
                         captureBeyondViewport=True)
        return base64.b64decode(shot["data"])


class Chromium:
    def __init__(self, executable: str, profile_dir: Path) -> None:
        # TMPDIR too: Chromium leaves scratch folders there, which belong with the profile.
        self.process = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": str(profile_dir)})
        port_file = profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.is_file() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        self.port = int(port_file.read_text().split()[0])

    def new_page(self) -> Page:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank",
                                         method="PUT")
        with urllib.request.urlopen(request, timeout=30) as response:
            target = json.loads(response.read())
        return Page(target["webSocketDebuggerUrl"])

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def open_report(browser: Chromium, report: Path) -> Page:
    page = browser.new_page()
    page.call("Page.navigate", url=report.resolve().as_uri())
    page.wait_for("Page.loadEventFired")
    return page


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


IMAGES_JS = ("JSON.stringify(Array.from(document.images).map("
             "i => ({src: i.getAttribute('src'), complete: i.complete, width: i.naturalWidth})))")

chromium_path = find_chromium()
needs_chromium = pytest.mark.skipif(
    chromium_path is None,
    reason="Chromium is not installed (Debian: apt-get install -y chromium)")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium = Chromium(chromium_path, tmp_path_factory.mktemp("chromium-profile"))
    yield chromium
    chromium.close()


def check_page(browser: Chromium, report: Path, shot: Path, min_images: int) -> Page:
    page = open_report(browser, report)
    images = json.loads(page.evaluate(IMAGES_JS))
    assert len(images) >= min_images
    for image in images:
        assert image["complete"] and image["width"] > 0, f"image did not load: {image['src']}"
    assert page.errors() == []
    assert all(url.startswith(("file:", "data:", "about:")) for url in page.requested_urls()), \
        page.requested_urls()
    data = page.screenshot()
    shot.write_bytes(data)
    width, height = png_size(data)
    assert width >= 1000 and height >= 1500  # the whole page, plots included
    assert len(data) > 100_000
    return page


@needs_chromium
def test_run_report_renders_in_chromium_with_every_plot_loaded(browser, tmp_path):
    from llmperf.report.run import build_run_report

    report = build_run_report(write_realistic_run(tmp_path / "run"))
    page = check_page(browser, report, tmp_path / "run.png", min_images=7)
    assert page.evaluate("document.querySelector('.banner.ok') !== null")
    assert "output throughput" in page.evaluate("document.querySelector('.tiles').textContent")


@needs_chromium
def test_partial_run_report_renders_with_its_banner(browser, tmp_path):
    from llmperf.report.run import build_run_report

    report = build_run_report(write_realistic_run(tmp_path / "run", interrupted=True))
    page = check_page(browser, report, tmp_path / "partial.png", min_images=5)
    assert "PARTIAL RUN" in page.evaluate("document.querySelector('.banner.partial').innerText")


@needs_chromium
def test_sweep_report_renders_in_chromium_with_every_plot_loaded(browser, tmp_path):
    from llmperf.report.sweep import build_sweep_report

    report = build_sweep_report(write_realistic_sweep(tmp_path / "sweep"))
    page = check_page(browser, report, tmp_path / "sweep.png", min_images=3)
    rows = page.evaluate("document.querySelectorAll('table.jobs tbody tr').length")
    assert rows == 4


@needs_chromium
def test_script_in_a_config_value_does_not_run(browser, tmp_path):
    from llmperf.report.run import build_run_report

    run = write_realistic_run(tmp_path / "run",
                              config_extra="note: \"<script>window.pwned = 1</script>\"\n")
    page = open_report(browser, build_run_report(run))
    assert page.evaluate("window.pwned === undefined")
    assert "<script>window.pwned = 1</script>" in page.evaluate("document.body.innerText")
