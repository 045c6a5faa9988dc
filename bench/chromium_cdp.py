#!/usr/bin/env python3
"""Drives headless Chromium over its DevTools pipe (--remote-debugging-pipe: commands on its
fd 3, replies on its fd 4, NUL-terminated JSON), with nothing but the standard library.

  chromium_cdp.py open URL [--runs N]
      opens a report page N times (a fresh tab each) and prints, as JSON, per open: the
      milliseconds from navigation to the load event (load_ms), to the explorer being drawn
      (ready_ms, the page's data-explorer-ready-ms from performance.now(); absent on a page
      without one), the wall time of the open as the driver saw it, and the time to draw the
      view of life 1's whole span (view_ms: replaying all its captures, flamegraph and table).
  chromium_cdp.py shot URL OUT.png [--select LIFE FROM TO] [--element CSS]
      photographs a page (the element CSS, or the viewport), after dragging the mouse across
      LIFE's timeline from FROM to TO seconds when asked.

Used by bench/report-explorer.sh and demo/screenshot.sh; the report's browser test has its
own client in Rust (tests/cli/devtools.rs).
"""

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--remote-debugging-pipe",
]
READY = "document.documentElement.hasAttribute('data-explorer-ready-ms')"


class Browser:
    def __init__(self, width=1200, height=900):
        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        if not browser:
            sys.exit("chromium not found (apt-get install chromium)")
        self.profile = tempfile.mkdtemp(prefix="heapwatch-cdp-")
        their_in, our_out = os.pipe()
        our_in, their_out = os.pipe()

        def fds():
            # Moved above 4 first, so that neither dup2 lands on the other's source; dup2's
            # copies are inheritable, and every other descriptor of ours is not.
            read = fcntl.fcntl(their_in, fcntl.F_DUPFD, 10)
            write = fcntl.fcntl(their_out, fcntl.F_DUPFD, 10)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.proc = subprocess.Popen(
            [browser, *FLAGS, "--user-data-dir=" + self.profile, "about:blank"],
            close_fds=False, preexec_fn=fds,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(their_in)
        os.close(their_out)
        self.out = os.fdopen(our_out, "wb")
        self.inbox = queue.Queue()
        threading.Thread(target=self._read, args=(os.fdopen(our_in, "rb"),), daemon=True).start()
        self.next_id = 0
        self.session = None
        self.width, self.height = width, height
        self.tab()

    def _read(self, stream):
        buf = b""
        while True:
            chunk = stream.read1(65536)
            if not chunk:
                return
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                self.inbox.put(json.loads(msg))

    def call(self, method, params=None, browser=False):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        self.out.write(json.dumps(msg).encode() + b"\0")
        self.out.flush()
        deadline = time.time() + 120
        while True:
            reply = self.inbox.get(timeout=max(deadline - time.time(), 0.1))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def tab(self):
        """A fresh page, the one commands go to from now on."""
        target = self.call("Target.createTarget", {"url": "about:blank"}, browser=True)
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target["targetId"], "flatten": True},
                                 browser=True)["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", {
            "width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})

    def eval(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression, timeout=120):
        test = f"(() => {{ try {{ return Boolean({expression}); }} catch (e) {{ return false; }} }})()"
        deadline = time.time() + timeout
        while not self.eval(test):
            if time.time() > deadline:
                raise RuntimeError(f"{expression}: still false after {timeout} s")
            time.sleep(0.02)

    def open(self, url, ready=READY):
        self.call("Page.navigate", {"url": url})
        self.wait_for(ready)

    def mouse(self, kind, x, y, pressed):
        self.call("Input.dispatchMouseEvent", {
            "type": kind, "x": x, "y": y, "clickCount": 1, "buttons": 1 if pressed else 0,
            "button": "left" if pressed or kind != "mouseMoved" else "none"})

    def drag_span(self, life, start, end):
        """Drags across a life's timeline from `start` to `end` seconds, by the chart's scale."""
        c = self.eval(f"""(() => {{ const c = document.querySelector('#explore-{life} svg.ex-chart');
            c.scrollIntoView({{block: 'center'}}); const r = c.getBoundingClientRect();
            return [r.left, r.top, r.width, r.height, Number(c.dataset.x0), Number(c.dataset.x1),
                    c.dataset.plot]; }})()""")
        left, top, width, height, x0, x1, plot = c
        p0, p1 = (float(v) for v in plot.split())

        def px(s):
            return left + (p0 + (s - x0) / (x1 - x0) * (p1 - p0)) * width / 960

        y = top + height / 2
        self.mouse("mouseMoved", px(start), y, False)
        self.mouse("mousePressed", px(start), y, True)
        for k in range(1, 9):
            self.mouse("mouseMoved", px(start + (end - start) * k / 8), y, True)
        self.mouse("mouseReleased", px(end), y, False)

    def shot(self, path, element=None):
        params = {"format": "png"}
        if element:
            r = self.eval(f"""(() => {{ const e = document.querySelector({json.dumps(element)});
                e.scrollIntoView({{block: 'start'}}); const r = e.getBoundingClientRect();
                return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]; }})()""")
            m = 12  # a margin, so that the picture does not end at the element's edge
            params["clip"] = {"x": max(r[0] - m, 0), "y": max(r[1] - m, 0),
                              "width": r[2] + 2 * m, "height": r[3] + 2 * m, "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def main(argv):
    if len(argv) >= 2 and argv[0] == "open":
        runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 1
        b = Browser()
        results = []
        try:
            for _ in range(runs):
                b.tab()
                began = time.time()
                b.open(argv[1], "document.readyState === 'complete'")
                wall = (time.time() - began) * 1000
                result = {
                    "load_ms": round(b.eval(
                        "performance.getEntriesByType('navigation')[0].loadEventEnd")),
                    "wall_ms": round(wall),
                }
                ready = b.eval("document.documentElement.getAttribute('data-explorer-ready-ms')")
                if ready is not None:
                    result["ready_ms"] = int(ready)
                    result["view_ms"] = round(b.eval("""(() => {
                        history.replaceState(null, '', '#life=1&from=-1&to=1e9');
                        const t = performance.now();
                        window.dispatchEvent(new HashChangeEvent('hashchange'));
                        return performance.now() - t; })()"""))
                results.append(result)
        finally:
            b.close()
        print(json.dumps(results))
    elif len(argv) >= 3 and argv[0] == "shot":
        b = Browser(width=1100, height=1400)
        try:
            b.open(argv[1])
            if "--select" in argv:
                at = argv.index("--select")
                b.drag_span(int(argv[at + 1]), float(argv[at + 2]), float(argv[at + 3]))
            element = argv[argv.index("--element") + 1] if "--element" in argv else None
            b.shot(argv[2], element)
        finally:
            b.close()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
