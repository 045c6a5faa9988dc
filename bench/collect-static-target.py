#!/usr/bin/env python3
"""A stand-in Go target that costs nothing to ask: serves the given heap profiles (gzipped
pprof, e.g. captured from a live target) in turn at /debug/pprof/heap, one per request, so
that consecutive captures differ. It measures the collector alone, without the target's
rendering time. Prints "listening on HOST:PORT" once ready.

usage: collect-static-target.py [--listen 127.0.0.1:0] PROFILE...
"""

import argparse
import http.server
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("profiles", nargs="+")
    args = parser.parse_args()
    bodies = []
    for path in args.profiles:
        with open(path, "rb") as f:
            bodies.append(f.read())
    state = {"next": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            if self.path.split("?")[0] != "/debug/pprof/heap":
                self.send_error(404)
                return
            body = bodies[state["next"] % len(bodies)]
            state["next"] += 1
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    host, _, port = args.listen.rpartition(":")
    server = http.server.HTTPServer((host, int(port)), Handler)
    print("listening on %s:%d" % server.server_address[:2], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
