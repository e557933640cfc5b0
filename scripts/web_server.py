#!/usr/bin/env python3
"""Serves examples/web over http://localhost for scripts/web.sh (WebGPU needs a secure
context: localhost, not file://), with the MIME types ES modules and wasm streaming need.

The browser tests POST their lines to /log (printed here as they come, so a hung browser
still shows how far it got) and their summary to /report (written to --report). Only the
loopback interface is bound.

Usage: web_server.py DIR [--port N] [--port-file F] [--report F] [--quiet]
"""
import argparse
import http.server
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--port", type=int, default=8000, help="0: any free port (see --port-file)")
    ap.add_argument("--port-file", help="write the port here once listening")
    ap.add_argument("--report", help="where a POST to /report is written")
    ap.add_argument("--quiet", action="store_true", help="do not log requests")
    args = ap.parse_args()

    class Handler(http.server.SimpleHTTPRequestHandler):
        extensions_map = {
            **http.server.SimpleHTTPRequestHandler.extensions_map,
            ".js": "text/javascript",
            ".wasm": "application/wasm",
            ".json": "application/json",
        }

        def __init__(self, *a, **kw):
            super().__init__(*a, directory=args.dir, **kw)

        def end_headers(self):
            # Always the freshly built package.
            self.send_header("Cache-Control", "no-store")
            super().end_headers()

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode("utf-8", "replace")
            if self.path == "/log":
                print(body, flush=True)
            elif self.path == "/report" and args.report:
                tmp = args.report + ".tmp"
                with open(tmp, "w") as f:
                    f.write(body)
                os.replace(tmp, args.report)
            else:
                self.send_error(404)
                return
            self.send_response(204)
            self.end_headers()

        def log_message(self, fmt, *a):
            if not args.quiet:
                sys.stderr.write("%s\n" % (fmt % a))

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    port = server.server_address[1]
    if args.port_file:
        with open(args.port_file, "w") as f:
            f.write(str(port))
    print(f"serving {os.path.abspath(args.dir)} at http://localhost:{port}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
