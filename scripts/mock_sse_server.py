"""A mock OpenAI-compatible streaming server on raw asyncio, sharing no code with any client
it serves: the yardstick that scripts/client_cost.py measures clients against.

    python scripts/mock_sse_server.py --port 8011 [--gap-s 0.005] [--host 127.0.0.1]

POST /v1/completions and /v1/chat/completions stream `max_tokens` chunks (HTTP/1.1, chunked
transfer encoding, keep-alive, as uvicorn serves vLLM), one every `--gap-s` seconds (0: all
at once), each holding one token's text (" tok"), then a usage chunk and `data: [DONE]`.
With "stream": false the whole answer comes in one JSON body. GET /v1/models and /health
answer at once. It prints "ready PORT" once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import json

MODEL = "mock"
TOKEN_TEXT = " tok"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _sse(body: dict) -> bytes:
    return _chunk(b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n")


def _json_response(status: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


async def _stream(writer: asyncio.StreamWriter, request: dict, chat: bool, gap_s: float) -> None:
    n = int(request.get("max_tokens") or 16)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    for i in range(n):
        if gap_s > 0:
            await asyncio.sleep(gap_s)
        finish = "length" if i == n - 1 else None
        if chat:
            choice = {"index": 0, "delta": {"content": TOKEN_TEXT}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": TOKEN_TEXT, "finish_reason": finish}
        writer.write(_sse({"id": "m", "object": "chunk", "model": MODEL, "choices": [choice]}))
        await writer.drain()
    prompt = request.get("prompt") or request.get("messages") or ""
    prompt_tokens = len(prompt) if isinstance(prompt, list) else max(1, len(str(prompt)) // 4)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
    writer.write(_sse({"id": "m", "object": "chunk", "model": MODEL, "choices": [], "usage": usage}))
    writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gap_s: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (line.partition(":") for line in lines[1:] if line)}
            length = int(headers.get("content-length", 0))
            body = json.loads(await reader.readexactly(length)) if length else {}
            if method == "GET" and path.endswith("/models"):
                writer.write(_json_response("200 OK", {"object": "list", "data": [{"id": MODEL}]}))
            elif method == "GET":
                writer.write(_json_response("200 OK", {}))
            elif path.endswith(("/completions", "/chat/completions")) and body.get("stream"):
                await _stream(writer, body, path.endswith("/chat/completions"), gap_s)
            elif path.endswith("/completions"):
                n = int(body.get("max_tokens") or 16)
                writer.write(_json_response("200 OK", {
                    "choices": [{"index": 0, "text": TOKEN_TEXT * n, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}}))
            else:
                writer.write(_json_response("404 Not Found", {"error": {"message": path}}))
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
        pass  # the client went away, or sent what this mock does not read: drop the connection
    finally:
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--gap-s", type=float, default=0.005)
    args = parser.parse_args()
    server = await asyncio.start_server(lambda r, w: _serve(r, w, args.gap_s), args.host,
                                        args.port, backlog=4096, limit=1 << 20)
    print(f"ready {args.port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
