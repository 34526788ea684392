#!/usr/bin/env python3
"""Slow-client measurement (docs/server.md, Connections): opens N connections that send a
request head one header line a second and never end it, then times a completion request on a
fresh connection once a second, and reports how the slow connections were answered.

    build/kestrel serve --model DIR --port 8123 --device cpu &
    python3 tests/server/slow_clients.py --port 8123 --slow 600 --seconds 15

Needs `ulimit -n` above N. Not part of the test suite (it takes N sockets and wall time).
"""
import argparse
import http.client
import json
import socket
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--slow", type=int, default=600)
parser.add_argument("--seconds", type=float, default=15)
parser.add_argument("--api-key", default="")
args = parser.parse_args()

slow = []
opened_at = time.time()
for i in range(args.slow):
    try:
        s = socket.create_connection(("127.0.0.1", args.port), timeout=2)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        slow.append(s)
    except OSError as e:
        print(f"connection {i}: {e}")
        break
stop = False


def drip():
    while not stop:
        for s in slow:
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                pass
        time.sleep(1)


threading.Thread(target=drip, daemon=True).start()
print(f"{len(slow)} slow connections open")
headers = {"Content-Type": "application/json"}
if args.api_key:
    headers["Authorization"] = "Bearer " + args.api_key
end = time.time() + args.seconds
while time.time() < end:
    start = time.time()
    try:
        c = http.client.HTTPConnection("127.0.0.1", args.port, timeout=30)
        c.request("POST", "/v1/completions", json.dumps({"prompt": "hi", "max_tokens": 1}), headers)
        r = c.getresponse()
        r.read()
        status = r.status
    except OSError as e:
        status = repr(e)
    print(f"completion: {status} in {time.time() - start:.3f} s", flush=True)
    time.sleep(1)
stop = True
# Past the head timeout (10 s) and the linger after the 408 (5 s).
time.sleep(max(0.0, opened_at + 16 - time.time()))
closed = timed_out = 0
for s in slow:
    s.setblocking(False)
    data = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                closed += 1
                break
            data += d
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
    timed_out += data.startswith(b"HTTP/1.1 408")
print(f"slow connections: {timed_out} got a 408, {closed} closed by the server, of {len(slow)}")
