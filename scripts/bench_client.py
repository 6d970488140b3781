"""Memory bound of the ComfyUI client (adapters/comfy_client.py) against a hostile loopback server.

  python scripts/bench_client.py view              # a 1 GiB /view answer, streamed to a temp folder
  python scripts/bench_client.py history           # a 300 MB /history answer with a Content-Length
  python scripts/bench_client.py history-chunked   # the same without a Content-Length (streamed)

Prints the time and the process's peak RSS; compare with the RSS of `import h3kit` alone (the baseline).
Results: docs/architecture.md ("Client limits").
"""

from __future__ import annotations

import resource
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from h3kit.adapters import comfy_client as cc

MIB = 1024**2
SIZES = {"view": 1024 * MIB, "history": 300 * MIB, "history-chunked": 300 * MIB}


def serve(kind: str) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            self.send_response(200)
            if kind != "history-chunked":
                self.send_header("Content-Length", str(SIZES[kind]))
            self.end_headers()
            chunk = b"[" + b"0," * (MIB // 2 - 1) + b"0"
            try:
                for _ in range(SIZES[kind] // len(chunk)):
                    self.wfile.write(chunk)
            except OSError:
                return  # the client hung up: that is the point
            self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(kind: str) -> None:
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    server = serve(kind)
    client = cc.ComfyClient(f"127.0.0.1:{server.server_address[1]}")
    started = time.monotonic()
    try:
        if kind == "view":
            path = client.download({"filename": "a.mp4"}, Path(tempfile.mkdtemp()), "a.mp4")
            print(f"downloaded {path.stat().st_size:,} bytes")
            path.unlink()
        else:
            client.get_json("/history/x")
    except cc.ComfyError as exc:
        print(f"{type(exc).__name__}: {exc}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{kind}: {time.monotonic() - started:.1f} s; peak RSS {peak:.0f} MiB (after import: {baseline:.0f} MiB)")
    server.shutdown()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "view")
