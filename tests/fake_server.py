"""An OpenAI-compatible server the launch tests control, on the standard library alone.

    python tests/fake_server.py --port N [--ready-after-s S] [--never-ready] [--exit-at-start CODE]
        [--die-after-requests K] [--ignore-sigterm] [--child] [--tpot-s S]

/v1/completions streams `max_tokens` chunks, one every `--tpot-s`, then a usage chunk.
`--die-after-requests K` SIGKILLs the server itself when request K+1 arrives (a crash
mid-run); `--child` starts a sleeping child in the same process group (a worker process
a real server would have) and writes its pid to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = "9.9.9-fake"
MODEL = "fake-model"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--ready-after-s", type=float, default=0.0)
    parser.add_argument("--never-ready", action="store_true")
    parser.add_argument("--exit-at-start", type=int, default=None)
    parser.add_argument("--die-after-requests", type=int, default=None)
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--tpot-s", type=float, default=0.002)
    args = parser.parse_args()
    print(
        f"fake server starting on port {args.port}; env FAKE_MARK={os.environ.get('FAKE_MARK')}",
        flush=True,
    )
    if args.exit_at_start is not None:
        print("fake server: failing at start as asked", flush=True)
        sys.exit(args.exit_at_start)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"child pid {child.pid}", flush=True)
    started = time.monotonic()
    served = {"count": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, fmt, *a):  # one line per request in the server's log
            print(fmt % a, flush=True)

        def ready(self) -> bool:
            return not args.never_ready and time.monotonic() - started >= args.ready_after_s

        def send_json(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if not self.ready():
                self.send_json(503, {"error": "loading"})
            elif self.path == "/health":
                self.send_json(200, {})
            elif self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            elif self.path == "/version":
                self.send_json(200, {"version": VERSION})
            else:
                self.send_json(404, {"error": "not found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                served["count"] += 1
                if (
                    args.die_after_requests is not None
                    and served["count"] > args.die_after_requests
                ):
                    os.kill(os.getpid(), signal.SIGKILL)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            n = int(body.get("max_tokens", 16))
            prompt = body.get("prompt")
            n_prompt = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
            for i in range(n):
                time.sleep(args.tpot_s)
                chunk = {
                    "choices": [
                        {
                            "index": 0,
                            "text": f" t{i}",
                            "finish_reason": "length" if i == n - 1 else None,
                        }
                    ]
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            usage = {
                "prompt_tokens": n_prompt,
                "completion_tokens": n,
                "total_tokens": n_prompt + n,
            }
            self.wfile.write(
                f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode()
            )

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN) if args.ignore_sigterm else signal.signal(
        signal.SIGTERM,
        lambda *_: (print("fake server: SIGTERM, stopping", flush=True), os._exit(0)),
    )
    server.serve_forever()


if __name__ == "__main__":
    main()
