"""The continuous batcher behind a small streaming HTTP endpoint (chapter 28).

    python -m transformer_lib.serving.server --model smollm2 --port 8000     # make serve
    curl -N http://127.0.0.1:8000/v1/completions -d '{"prompt": "The capital of France is", "max_tokens": 16, "stream": true}'

One route in OpenAI's completions format, ``POST /v1/completions`` with a JSON body: ``prompt`` (a
string, or a list of token ids), ``max_tokens`` (1 .. ``--max-tokens``), optional ``temperature``
(0 = greedy) and ``seed``, and ``stream``. With ``stream: true`` the answer is server-sent events,
one ``data: {...}`` line per token (its ``text`` and, beyond OpenAI's fields, its ``token_ids``),
then ``data: [DONE]``; without it one JSON object. ``GET /health`` tells the load.

How it is built: the asyncio server only parses, validates and streams. One thread owns the model
and a :class:`~.scheduler.ContinuousBatcher`: it takes new requests and cancellations from a
thread-safe queue between steps, runs steps while there is work, and hands each token back to the
request's own asyncio queue (``loop.call_soon_threadsafe``). So requests join and leave the running
batch at every step, whatever the HTTP side does.

What keeps it serving: it listens on 127.0.0.1 only; at most ``--max-batch`` + ``--queue``
requests are admitted at once (the next gets 503 with a ``Retry-After``); every bad request gets a
4xx with a message (400: not JSON, a missing or mistyped field, a prompt longer than
``--max-prompt`` tokens, ids outside the vocabulary; 404/405 for other routes and methods); a
request that runs past ``--timeout`` seconds is cancelled (its stream ends with an error event;
without streaming, 504); a client that disconnects is cancelled too.

``--model tiny`` serves a small seeded model on UTF-8 bytes (:func:`tiny_model`: no weights to
load), which the server's load test uses.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import queue
import threading
import time

import torch

from .scheduler import ContinuousBatcher
from .workload import Request

__all__ = ["tiny_model", "ByteTokenizer", "build_app", "main", "HOST"]

HOST = "127.0.0.1"  # never another interface


def tiny_model():
    """The test server's model: a seeded 2-block RoPE DecoderOnlyLM over the 256 byte values."""
    from ..model import DecoderOnlyLM
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return DecoderOnlyLM(256, 64, 4, 2, positional="rope", num_kv_heads=2, max_len=1024).eval()


class ByteTokenizer:
    """Text as its UTF-8 bytes (ids 0..255); ids back to text with undecodable bytes replaced."""
    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


class _SmolTokenizer:
    def __init__(self, tokenizer):
        self.tokenizer, self.vocab_size = tokenizer, tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)


class BadRequest(Exception):
    """A request the server refuses with a 4xx status and a message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def parse_request(body: bytes, tokenizer, limits: dict) -> dict:
    """The request's fields, checked: raises :class:`BadRequest` (400) saying what is wrong."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BadRequest(400, f"the body is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise BadRequest(400, "the body must be a JSON object")
    prompt = data.get("prompt")
    if isinstance(prompt, str):
        if not prompt:
            raise BadRequest(400, "prompt: expected a non-empty string or list of token ids")
        ids = tokenizer.encode(prompt)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        ids = prompt
        if min(ids) < 0 or max(ids) >= tokenizer.vocab_size:
            raise BadRequest(400, f"prompt: token ids must lie in [0, {tokenizer.vocab_size})")
    else:
        raise BadRequest(400, "prompt: expected a non-empty string or list of token ids")
    if len(ids) > limits["max_prompt"]:
        raise BadRequest(400, f"prompt: {len(ids)} tokens, more than this server's {limits['max_prompt']}")
    max_tokens = data.get("max_tokens", 16)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= limits["max_tokens"]:
        raise BadRequest(400, f"max_tokens: expected an integer in [1, {limits['max_tokens']}], got {max_tokens!r}")
    temperature = data.get("temperature", 0.0)
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not 0 <= temperature <= 5:
        raise BadRequest(400, f"temperature: expected a number in [0, 5], got {temperature!r}")
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise BadRequest(400, f"seed: expected an integer >= 0, got {seed!r}")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(400, f"stream: expected true or false, got {stream!r}")
    return {"ids": ids, "max_tokens": max_tokens, "temperature": float(temperature), "seed": seed, "stream": stream}


class Engine:
    """The model's thread: a :class:`ContinuousBatcher` fed through a thread-safe inbox."""

    def __init__(self, model, loop, max_batch: int, eos_id: int | None = None):
        self.loop, self.inbox = loop, queue.SimpleQueue()
        self.queues: dict[int, asyncio.Queue] = {}
        self.batcher = ContinuousBatcher(model, max_batch=max_batch, num_blocks=512, eos_id=eos_id,
                                         on_token=self._token, on_finish=self._finish)
        self.thread = threading.Thread(target=self._run, daemon=True, name="batcher")
        self.thread.start()

    def _token(self, r: Request, token: int) -> None:
        self.loop.call_soon_threadsafe(self.queues[r.id].put_nowait, ("token", token))

    def _finish(self, r: Request) -> None:
        q = self.queues.pop(r.id, None)
        if q is not None:
            self.loop.call_soon_threadsafe(q.put_nowait, ("done", None))

    def submit(self, r: Request) -> asyncio.Queue:
        q = self.queues[r.id] = asyncio.Queue()
        self.inbox.put(("submit", r))
        return q

    def cancel(self, request_id: int) -> None:
        self.inbox.put(("cancel", request_id))

    def _run(self) -> None:
        with torch.no_grad():
            while True:
                block = not self.batcher.busy()
                try:
                    while True:  # drain the inbox; wait on it only when idle
                        kind, item = self.inbox.get(block=block, timeout=None if block else 0)
                        block = False
                        if kind == "submit":
                            self.batcher.submit(item)
                        else:
                            self.batcher.cancel(item)
                            self.queues.pop(item, None)
                except queue.Empty:
                    pass
                if self.batcher.busy():
                    self.batcher.step()


def build_app(model, tokenizer, max_batch: int = 8, queue_size: int = 32, max_prompt: int = 512,
              max_tokens: int = 256, timeout: float = 60.0, model_name: str = "model", eos_id: int | None = None):
    """The aiohttp application (its engine thread starts with the app)."""
    from aiohttp import web

    limits = {"max_prompt": max_prompt, "max_tokens": max_tokens}
    state = {"in_flight": 0, "next_id": 0}

    def error(status: int, message: str, **headers):
        return web.json_response({"error": {"message": message, "type": "invalid_request_error"
                                            if status < 500 else "server_error", "code": status}},
                                 status=status, headers=headers)

    async def start(app):
        app["engine"] = Engine(model, asyncio.get_running_loop(), max_batch, eos_id)

    async def health(request):
        return web.json_response({"status": "ok", "in_flight": state["in_flight"],
                                  "limit": max_batch + queue_size})

    async def completions(request):
        try:
            fields = parse_request(await request.read(), tokenizer, limits)
        except BadRequest as bad:
            return error(bad.status, bad.message)
        if state["in_flight"] >= max_batch + queue_size:
            return error(503, f"the server is full ({max_batch} running, {queue_size} queued): retry later",
                         **{"Retry-After": "1"})
        engine = request.app["engine"]
        state["in_flight"] += 1
        rid, state["next_id"] = state["next_id"], state["next_id"] + 1
        r = Request(rid, fields["ids"], fields["max_tokens"], temperature=fields["temperature"], seed=fields["seed"])
        tokens_q = engine.submit(r)
        deadline = time.monotonic() + timeout
        name, created = f"cmpl-{rid}", int(time.time())

        def chunk(text, ids, finish):
            return {"id": name, "object": "text_completion", "created": created, "model": model_name,
                    "choices": [{"index": 0, "text": text, "token_ids": ids, "finish_reason": finish}]}

        async def next_token():
            left = deadline - time.monotonic()
            if left <= 0:
                raise asyncio.TimeoutError
            return await asyncio.wait_for(tokens_q.get(), left)

        ids, text, finished = [], "", False
        try:
            if not fields["stream"]:
                try:
                    while (event := await next_token())[0] == "token":
                        ids.append(event[1])
                except asyncio.TimeoutError:
                    return error(504, f"the request ran past this server's {timeout:g} s limit")
                finished = True
                reason = "stop" if eos_id is not None and ids and ids[-1] == eos_id else "length"
                body = chunk(tokenizer.decode(ids), ids, reason)
                body["usage"] = {"prompt_tokens": len(r.prompt), "completion_tokens": len(ids),
                                 "total_tokens": len(r.prompt) + len(ids)}
                return web.json_response(body)
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await response.prepare(request)
            try:
                while (event := await next_token())[0] == "token":
                    ids.append(event[1])
                    now = tokenizer.decode(ids)
                    await response.write(f"data: {json.dumps(chunk(now[len(text):], [event[1]], None))}\n\n".encode())
                    text = now
                finished = True
                reason = "stop" if eos_id is not None and ids and ids[-1] == eos_id else "length"
                await response.write(f"data: {json.dumps(chunk('', [], reason))}\n\n".encode())
            except asyncio.TimeoutError:
                message = {"error": {"message": f"the request ran past this server's {timeout:g} s limit",
                                     "code": 504}}
                await response.write(f"data: {json.dumps(message)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            return response
        finally:
            state["in_flight"] -= 1
            if not finished:  # timed out or the client left: free its row and blocks
                engine.cancel(rid)

    app = web.Application(client_max_size=1 << 20)
    app.on_startup.append(start)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", health)
    return app


def load(name: str):
    """(model, tokenizer, eos id) for ``--model``: 'tiny' or 'smollm2' (float32), 'smollm2-int8', 'smollm2-int4'."""
    if name == "tiny":
        return tiny_model(), ByteTokenizer(), None
    from ..pretrained import load_smollm2
    lm = load_smollm2()
    model = lm.model
    if name != "smollm2":
        from ..quantization import quantize
        model = quantize(model, 8 if name == "smollm2-int8" else 4)
    return model, _SmolTokenizer(lm.tokenizer), 2  # SmolLM2's end-of-text id


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="An OpenAI-style streaming completions server on 127.0.0.1.")
    ap.add_argument("--model", default="smollm2", choices=["tiny", "smollm2", "smollm2-int8", "smollm2-int4"])
    ap.add_argument("--port", type=int, default=8000, help="0: any free port (printed)")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--queue", type=int, default=32)
    ap.add_argument("--max-prompt", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from aiohttp import web

    model, tokenizer, eos = load(args.model)
    app = build_app(model, tokenizer, args.max_batch, args.queue, args.max_prompt, args.max_tokens, args.timeout,
                    args.model, eos)

    async def serve():
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, HOST, args.port)
        await site.start()
        port = runner.addresses[0][1]
        print(f"listening on http://{HOST}:{port}", flush=True)
        await asyncio.Event().wait()  # until SIGTERM / Ctrl-C

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
