#!/usr/bin/env python3
"""HTTP server for the PromiseFoundation tests (standard library only).

Listens on 127.0.0.1 on a free port and prints "PORT <n>" on stdout once ready. It exits when
stdin reaches end of file (the test process closed it or died), on SIGTERM, or after
--lifetime seconds, so it never outlives the tests.

Endpoints (every request may carry ?id=<token>, used to find its events):
  GET  /fast                 200, body "fast"
  GET  /slow?chunks=N&interval=S&size=B
                             200 with Content-Length N*B, one B-byte chunk every S seconds
                             (defaults 100 chunks, 0.1 s, 1024 bytes: 10 s in all)
  GET  /status/<code>        <code> with body "status <code> body"
  GET  /text?text=T[&charset=C][&type=M][&status=N]
                             N (default 200) with body T encoded in charset C (Python's codec
                             of that name; UTF-8 and no charset parameter when absent) and
                             Content-Type "M; charset=C" (M defaults to text/plain)
  POST/PUT /upload           200, body "received <byte count>"
  POST     /slow             as GET /slow, after reading the request body
  GET  /events?id=X[&type=T][&wait=S]
                             JSON list of recorded events for X (of type T), waiting up to S
                             seconds for at least one
Events: {"id", "type": "start"|"closed"|"finished", "time": wall clock seconds, "bytes": sent}.
"closed" is recorded the moment the client's connection closes during /slow (the socket is
watched for end of file between chunks, so detection does not wait for the next write).
"""

import argparse
import json
import os
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

events = []
events_changed = threading.Condition()


def record(event_id, event_type, sent=0):
    with events_changed:
        events.append({"id": event_id, "type": event_type, "time": time.time(), "bytes": sent})
        events_changed.notify_all()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # keep the test output quiet
        pass

    def query(self):
        parsed = urlparse(self.path)
        return parsed.path, {k: v[-1] for k, v in parse_qs(parsed.query).items()}

    def reply(self, code, body, content_type="text/plain"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path, q = self.query()
        if path == "/fast":
            self.reply(200, "fast")
        elif path == "/slow":
            self.slow(q)
        elif path == "/text":
            self.text(q)
        elif path.startswith("/status/"):
            code = int(path[len("/status/"):])
            self.reply(code, "status %d body" % code)
        elif path == "/events":
            self.events(q)
        elif path == "/upload":
            self.upload()
        else:
            self.reply(404, "no such endpoint: " + path)

    def do_POST(self):
        path, q = self.query()
        if path == "/upload":
            self.upload()
        elif path == "/slow":
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.slow(q)
        else:
            self.reply(404, "no such endpoint: " + path)

    do_PUT = do_POST

    def text(self, q):
        charset = q.get("charset")
        content_type = q.get("type", "text/plain")
        if charset:
            content_type += "; charset=" + charset
        self.reply(int(q.get("status", 200)), q.get("text", "").encode(charset or "utf-8"), content_type)

    def upload(self):
        length = int(self.headers.get("Content-Length") or 0)
        received = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                received += len(self.rfile.read(size))
                self.rfile.readline()
        else:
            while received < length:
                chunk = self.rfile.read(min(65536, length - received))
                if not chunk:
                    break
                received += len(chunk)
        self.reply(200, "received %d" % received)

    def slow(self, q):
        event_id = q.get("id", "")
        chunks = int(q.get("chunks", 100))
        interval = float(q.get("interval", 0.1))
        size = int(q.get("size", 1024))
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(chunks * size))
        self.end_headers()
        self.wfile.flush()
        record(event_id, "start")
        sock = self.connection
        sent = 0
        start = time.monotonic()
        try:
            for i in range(chunks):
                self.wfile.write(b"x" * size)
                self.wfile.flush()
                sent += size
                if self.peer_closed_before(sock, start + (i + 1) * interval):
                    record(event_id, "closed", sent)
                    self.close_connection = True
                    return
            record(event_id, "finished", sent)
        except (BrokenPipeError, ConnectionResetError, OSError):
            record(event_id, "closed", sent)
            self.close_connection = True

    @staticmethod
    def peer_closed_before(sock, deadline):
        """Waits until `deadline`; returns True as soon as the peer closes the connection."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            readable, _, _ = select.select([sock], [], [], remaining)
            if readable:
                try:
                    data = sock.recv(4096)
                except (ConnectionResetError, OSError):
                    return True
                if not data:
                    return True

    def events(self, q):
        event_id = q.get("id")
        event_type = q.get("type")
        wait = float(q.get("wait", 0))

        def matching():
            return [e for e in events
                    if (event_id is None or e["id"] == event_id)
                    and (event_type is None or e["type"] == event_type)]

        deadline = time.monotonic() + wait
        with events_changed:
            found = matching()
            while not found and time.monotonic() < deadline:
                events_changed.wait(deadline - time.monotonic())
                found = matching()
        self.reply(200, json.dumps(found), "application/json")


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # Clients that go away mid-request (cancelled tasks) are expected: say nothing.
        pass


def exit_when_stdin_closes():
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lifetime", type=float, default=600)
    args = parser.parse_args()
    server = QuietServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=exit_when_stdin_closes, daemon=True).start()
    timer = threading.Timer(args.lifetime, lambda: os._exit(0))
    timer.daemon = True
    timer.start()
    print("PORT %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
