"""The streaming completions server (transformer_lib.serving.server) as a real process: a burst of
concurrent streaming clients each get exactly their one-at-a-time greedy tokens, bad requests get
a 4xx with a message while the server keeps serving, a full server answers 503, and it listens on
127.0.0.1 only. Started and stopped by its process id (tests/_servers.py), every wait bounded."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPConnection
from pathlib import Path

import pytest

from _servers import stop
from transformer_lib.sampling import generate_ids
from transformer_lib.serving.server import tiny_model

ROOT = Path(__file__).resolve().parents[1]
MAX_BATCH, QUEUE = 4, 4


def _start(max_tokens, timeout):
    """The tiny model's server as a process on a free port: (process, port), every wait bounded."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "transformer_lib.serving.server", "--model", "tiny", "--port",
                                "0", "--max-batch", str(MAX_BATCH), "--queue", str(QUEUE), "--max-prompt", "64",
                                "--max-tokens", str(max_tokens), "--timeout", str(timeout), "--threads", "1"],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return process


@pytest.fixture(scope="module")
def server():
    yield from _serve(200, 20)


def _serve(max_tokens, timeout):
    process = _start(max_tokens, timeout)
    try:
        deadline, port = time.monotonic() + 30, None
        while port is None and time.monotonic() < deadline and process.poll() is None:
            line = process.stdout.readline()  # the server prints its address once it listens
            if line.startswith("listening on http://127.0.0.1:"):
                port = int(line.rsplit(":", 1)[1])
        assert port is not None, f"the server did not start (exit code {process.poll()})"
        yield process, port
    finally:
        stop(process, grace_s=10)


def _post(port, body, timeout=30):
    conn = HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/completions", body=body if isinstance(body, (bytes, str)) else json.dumps(body),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read().decode()
    conn.close()
    return response.status, data


def _stream(port, prompt, max_tokens):
    """One streaming client: (status, token ids from the events, the events' texts joined, saw [DONE])."""
    status, data = _post(port, {"prompt": prompt, "max_tokens": max_tokens, "stream": True})
    if status != 200:
        return status, None, None, False
    ids, text, done = [], "", False
    for line in data.split("\n\n"):
        if not line.startswith("data: "):
            continue
        payload = line[len("data: "):]
        if payload == "[DONE]":
            done = True
            continue
        choice = json.loads(payload)["choices"][0]
        ids += choice["token_ids"]
        text += choice["text"]
    return status, ids, text, done


PROMPTS = [("The cat sat on", 12), ("Hello, world", 30), ([72, 105, 33], 5), ("a", 40), ("Serving many users", 20),
           ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 25), ("zz", 1), ("Paged attention keeps blocks", 17)]


def test_a_burst_of_streaming_clients_each_get_their_one_at_a_time_tokens(server):
    _, port = server
    model = tiny_model()
    want = [generate_ids(model, list(p.encode()) if isinstance(p, str) else p, n) for p, n in PROMPTS]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:  # 8 clients at once: 4 run, 4 queue
        got = list(pool.map(lambda pn: _stream(port, *pn), PROMPTS))
    assert [g[0] for g in got] == [200] * len(PROMPTS)
    assert [g[1] for g in got] == want
    assert all(g[3] for g in got)  # every stream ends with [DONE]
    assert got[0][2] == bytes(want[0]).decode("utf-8", errors="replace")


BAD = [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (json.dumps({"max_tokens": 4}), "prompt"),
    (json.dumps({"prompt": "", "max_tokens": 4}), "prompt"),
    (json.dumps({"prompt": [1, "x"], "max_tokens": 4}), "prompt"),
    (json.dumps({"prompt": [1, 300], "max_tokens": 4}), r"\[0, 256\)"),
    (json.dumps({"prompt": "x" * 65, "max_tokens": 4}), "more than this server's 64"),
    (json.dumps({"prompt": "hi", "max_tokens": 0}), "max_tokens"),
    (json.dumps({"prompt": "hi", "max_tokens": 201}), "max_tokens"),
    (json.dumps({"prompt": "hi", "max_tokens": "5"}), "max_tokens"),
    (json.dumps({"prompt": "hi", "temperature": -1}), "temperature"),
    (json.dumps({"prompt": "hi", "stream": "yes"}), "stream"),
]


@pytest.mark.parametrize("body,message", BAD)
def test_bad_requests_get_400_with_a_message_and_the_server_keeps_serving(server, body, message):
    import re
    _, port = server
    status, data = _post(port, body)
    assert status == 400
    assert re.search(message, json.loads(data)["error"]["message"])
    status, data = _post(port, {"prompt": "still here", "max_tokens": 3})
    assert status == 200 and len(json.loads(data)["choices"][0]["token_ids"]) == 3


def test_other_routes_and_methods_are_4xx(server):
    _, port = server
    conn = HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/v1/completions")
    assert conn.getresponse().status == 405
    conn.close()
    conn = HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/v1/chat", body="{}")
    assert conn.getresponse().status == 404
    conn.close()


def test_a_full_server_answers_503_and_serves_the_rest(server):
    _, port = server
    n = 3 * (MAX_BATCH + QUEUE)  # long requests, all at once: more than it admits
    with ThreadPoolExecutor(n) as pool:
        got = list(pool.map(lambda i: _post(port, {"prompt": [i + 1], "max_tokens": 200}), range(n)))
    statuses = [s for s, _ in got]
    assert set(statuses) <= {200, 503} and statuses.count(503) >= 1 and statuses.count(200) >= MAX_BATCH
    assert all("retry later" in json.loads(d)["error"]["message"] for s, d in got if s == 503)
    model = tiny_model()
    for i, (s, d) in enumerate(got):
        if s == 200:
            assert json.loads(d)["choices"][0]["token_ids"] == generate_ids(model, [i + 1], 200)


def test_it_listens_on_loopback_only(server):
    process, port = server
    addresses = [a for a in _other_addresses()]
    for address in addresses:  # the machine's other interfaces: nothing answers there
        with socket.socket() as s:
            s.settimeout(2)
            assert s.connect_ex((address, port)) != 0
    out = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout if _has("ss") else ""
    for line in out.splitlines():
        if f"pid={process.pid}," in line:
            assert f"127.0.0.1:{port}" in line


def _other_addresses():
    try:
        hostname = socket.gethostname()
        return sorted({a[4][0] for a in socket.getaddrinfo(hostname, None, socket.AF_INET)} - {"127.0.0.1"})
    except OSError:
        return []


def _has(tool):
    from shutil import which
    return which(tool) is not None


TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def hasty_server():
    """A server whose per-request limit (0.5 s) is ten times shorter than the CPU time a 1,000-token
    request takes the tiny model (~5 ms a token on one thread: 5 s)."""
    yield from _serve(1000, TIMEOUT_S)


def _health(port):
    conn = HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/health")
    body = json.loads(conn.getresponse().read().decode())
    conn.close()
    return body


def test_a_request_past_the_timeout_gets_504_its_row_is_freed_and_the_server_keeps_serving(hasty_server):
    _, port = hasty_server
    start = time.monotonic()
    status, data = _post(port, {"prompt": "a", "max_tokens": 1000})
    assert status == 504 and "0.5 s limit" in json.loads(data)["error"]["message"]
    assert time.monotonic() - start >= TIMEOUT_S
    # streaming: the tokens made in time arrive, then an error event, then [DONE]
    status, data = _post(port, {"prompt": "a", "max_tokens": 1000, "stream": True})
    events = [line[len("data: "):] for line in data.split("\n\n") if line.startswith("data: ")]
    assert status == 200 and events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == 504
    assert sum(len(json.loads(e)["choices"][0]["token_ids"]) for e in events[:-2]) < 1000
    # the cancelled requests leave the batch: nothing is in flight, and a short request is served
    deadline = time.monotonic() + 30
    while _health(port)["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _health(port)["in_flight"] == 0
    status, data = _post(port, {"prompt": "hi", "max_tokens": 2})
    assert status == 200 and json.loads(data)["choices"][0]["token_ids"] == generate_ids(tiny_model(), list(b"hi"), 2)
