#!/usr/bin/env python3
"""Static-file origin for bench/allocations.sh and bench/instructions.sh
(Python 3 standard library only).

A threaded HTTP/1.1 keep-alive server on 127.0.0.1:--port that serves the
files of --dir (http.server's SimpleHTTPRequestHandler), every response with
`Cache-Control: max-age=--max-age`; it logs nothing.
"""

import argparse
import functools
import http.server


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    max_age = 3600

    def end_headers(self):
        self.send_header("Cache-Control", f"max-age={self.max_age}")
        super().end_headers()

    def log_message(self, *a):
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--dir", required=True, help="the directory served")
    ap.add_argument("--max-age", type=int, default=3600)
    args = ap.parse_args()
    Handler.max_age = args.max_age
    handler = functools.partial(Handler, directory=args.dir)
    http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler).serve_forever()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
