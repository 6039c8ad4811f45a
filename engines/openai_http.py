"""An engine that streams from any OpenAI-compatible server: vLLM, SGLang, TGI, llama.cpp, llmperf-serve.

HTTP runs on the engine's own thread and event loop with one shared httpx client
(keep-alive connections, as many as the load needs), so the client outlives the
load generator's loop and its receipt times do not wait on the load generator.
Each SSE chunk becomes a `TokenEvent` stamped when its line arrived (`received_s`, which
the load generator takes as the token's time, so a busy load-generator loop does not
delay TTFT or ITL); the final
event carries the usage chunk's counts (`stream_options.include_usage`), or,
when the server sends none, the output text's length in tokens of the local
tokenizer (bytes without a tokenizer.json), and says which (`token_count_source`:
"server usage", "tokenizer" or "bytes"). A server error, a timeout or a dropped connection
ends the request with finish_reason "error" and the reason (each chunk received counts as one output
token); nothing raises into the caller.

Chunks and tokens: servers send about one token per chunk, but not always its
text (a partial character, a special token), so each chunk counts as one token
arrival. Its `token_ids` are the local tokenizer's ids for the chunk's text, or
`(UNKNOWN_TOKEN_ID,)` when the text is empty. With `n` > 1 each event carries its choice's
`index` (`TokenEvent.choice`), and the usage counts every choice's tokens.

Whole responses (`stream=False`) and embeddings deliver only the final event (`response`
"whole" or "embedding"): no token times, so no TTFT or ITL, and counts from `usage`.

Connection-pool wait: each request's time from being handed to httpx until it starts on a
connection (httpcore's first trace event: opening a connection, or writing the request on a
kept-alive one) is `TokenEvent.pool_wait_s` on its final event; with fewer
`max_connections` than requests in flight it is the queue the client itself adds.
The same trace stamps when the request's last byte was written (`written_s`) and when the
response's headers arrived (`headers_s`): from the intended arrival to the first, the
client's own part of a request (its figure `client_send_s`); from there to the second, the
network and the server's work before it answers (`headers_wait_s`).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from engines.base import EngineCapabilities, Request, TokenEvent, Tokenizer
from engines.channel import EventChannel, EventMailbox
from engines.openai_options import OpenAIEngineConfig
from engines.openai_stream import ChunkIds, ServerError, StreamState, error_message
from engines.reference.tokenizer import BYTE_OFFSET, ByteTokenizer, HFTokenizer
from engines.served_model import served_model

ENDPOINT_PATHS = {"completions": "completions", "chat": "chat/completions", "embeddings": "embeddings"}
STOP_TIMEOUT_S = 10.0


class OpenAIEngine:
    """A client of an OpenAI-compatible server; its options are `OpenAIEngineConfig`'s.

    With prompt_format "text" it sends the prompt text (prompt_text, else the decoded
    prompt_token_ids); "token_ids" sends the ids themselves, which vLLM, SGLang and
    llmperf-serve accept on /v1/completions and which keeps prompt lengths exact.
    Without a tokenizer, the byte-level one counts tokens when the server sends no usage.
    `model_config` and `precision` give the served model's shape and storage, for the roofline.
    """

    name = "openai"
    capabilities = EngineCapabilities(multiprocess=True)

    def __init__(self, model: str, options: OpenAIEngineConfig | None = None, **overrides: Any):
        opts = replace(options or OpenAIEngineConfig(), **overrides)
        self.opts = opts
        self.model = model
        self.base_url = opts.base_url.rstrip("/")
        self.api_key = opts.api_key
        self.request_timeout_s = opts.request_timeout_s
        self.connect_timeout_s = opts.connect_timeout_s
        self.max_connections = opts.max_connections
        self.endpoint = opts.endpoint
        self.prompt_format = opts.prompt_format
        self.tokenizer_path = opts.tokenizer
        self.tokenizer: Tokenizer = load_client_tokenizer(opts.tokenizer)
        self.served = served_model(opts.model_config, opts.tokenizer, opts.precision)
        self.stream_responses = opts.stream
        self.n, self.best_of = opts.n, opts.best_of
        self.url = f"{self.base_url}/{ENDPOINT_PATHS[opts.endpoint]}"
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._http: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task] = set()
        # Every stream's events to the caller's loop: first tokens and last events at once,
        # the tokens between at most 50 ms later (engines/channel.py)
        self._mailbox: EventMailbox | None = None
        self._chunk_ids = ChunkIds(self.tokenizer)

    # -- Engine protocol ---------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            ready = threading.Event()
            self._thread = threading.Thread(
                target=self._run_loop, args=(ready,), name="openai-http", daemon=True
            )
            self._thread.start()
            ready.wait()

    def stop(self) -> None:
        """Ends open streams with finish_reason "abort" and closes the connections."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if thread is None:
                return
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(STOP_TIMEOUT_S)
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            self._loop = self._thread = self._http = None

    async def stream(self, request: Request) -> AsyncIterator[TokenEvent]:
        self.start()
        loop = asyncio.get_running_loop()
        if self._mailbox is None or self._mailbox.loop is not loop:
            self._mailbox = EventMailbox(loop)
        channel = EventChannel(self._mailbox)
        future = asyncio.run_coroutine_threadsafe(
            self._exchange(request, channel.deliver), self._loop
        )
        try:
            async for event in channel.events():
                yield event
        finally:
            future.cancel()  # the caller stopped listening: drop the connection, the server aborts

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "base_url": self.base_url,
            "endpoint": self.endpoint,
            "stream": self.stream_responses,
            "n": self.n,
            "best_of": self.best_of,
            "prompt_format": self.prompt_format,
            "tokenizer": self.tokenizer_path,
            "request_timeout_s": self.request_timeout_s,
            "connect_timeout_s": self.connect_timeout_s,
            "max_connections": self.max_connections,
            **self._served_info(),
        }

    def _served_info(self) -> dict[str, Any]:
        """The served model's shape and precision, for the roofline (its bytes are accounted
        by llmperf.perf.footprint: a server does not report what it holds)."""
        if self.served is None:
            return {}
        return {
            "model_config": self.served.config.to_dict(),
            "model_config_source": self.served.source,
            "params": self.served.config.num_params(),
            "precision": self.served.precision,
        }

    # -- the HTTP thread ---------------------------------------------------------------

    def _run_loop(self, ready: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(
                connect=self.connect_timeout_s,
                read=self.request_timeout_s,
                write=self.request_timeout_s,
                pool=None,  # waiting for a free connection counts against request_timeout_s
            ),
            limits=httpx.Limits(
                max_connections=self.max_connections, max_keepalive_connections=self.max_connections
            ),
        )
        ready.set()
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._http.aclose()

    async def _exchange(self, request: Request, deliver: Callable[[TokenEvent], None]) -> None:
        """One request, start to finish; always delivers a final event (unless the caller left)."""
        task = asyncio.current_task()
        self._tasks.add(task)
        state = StreamState(request)
        try:
            await asyncio.wait_for(self._post(request, state, deliver), self.request_timeout_s)
            final = self._final_event(request, state)
        except asyncio.CancelledError:
            deliver(state.end(time.perf_counter(), "abort", "the engine stopped"))
            raise
        except asyncio.TimeoutError:
            final = state.end(
                time.perf_counter(), "error", f"timed out after {self.request_timeout_s} s"
            )
        except httpx.TimeoutException as err:  # connect_timeout_s, or no byte for request_timeout_s
            final = state.end(time.perf_counter(), "error", f"timeout: {type(err).__name__}: {err}")
        except httpx.HTTPError as err:
            final = state.end(
                time.perf_counter(), "error", f"connection failed: {type(err).__name__}: {err}"
            )
        except ServerError as err:
            final = state.end(time.perf_counter(), "error", str(err))
        except (
            Exception
        ) as err:  # a malformed stream, a server error: this request fails, the run goes on
            final = state.end(time.perf_counter(), "error", f"{type(err).__name__}: {err}")
        finally:
            self._tasks.discard(task)
        deliver(replace(final, pool_wait_s=state.pool_wait_s, written_s=state.written_s,
                        headers_s=state.headers_s, response=self.response_kind))

    async def _post(
        self, request: Request, state: StreamState, deliver: Callable[[TokenEvent], None]
    ) -> None:
        headers = {"X-Request-Id": request.id}
        sent_s = time.perf_counter()

        async def trace(name: str, info: dict) -> None:  # httpcore's events, in order
            now = time.perf_counter()
            if state.pool_wait_s is None:
                state.pool_wait_s = now - sent_s
            if name.endswith("send_request_body.complete"):  # http11. or http2.
                state.written_s = now
            elif name.endswith("receive_response_headers.complete"):
                state.headers_s = now

        body, extensions = self._body(request), {"trace": trace}
        if not self.streaming:
            response = await self._http.post(self.url, json=body, headers=headers, extensions=extensions)
            if response.status_code >= 400:
                raise ServerError(f"HTTP {response.status_code}: {error_message(response.content)}")
            state.on_whole(response.json(), self.endpoint, time.perf_counter())
            return
        async with self._http.stream(
            "POST", self.url, json=body, headers=headers, extensions=extensions
        ) as response:
            if response.status_code >= 400:
                raw = await response.aread()
                raise ServerError(f"HTTP {response.status_code}: {error_message(raw)}")
            async for line in response.aiter_lines():
                now = time.perf_counter()
                if not line.startswith("data:"):
                    continue  # blank separators, comments, event names
                data = line[5:].strip()
                if data == "[DONE]":
                    state.done = True  # read on to the end of the body, so the connection is reused
                    continue
                for event in state.on_chunk(json.loads(data), now, self._chunk_ids):
                    deliver(event)

    @property
    def streaming(self) -> bool:
        return self.stream_responses and self.endpoint != "embeddings"

    @property
    def response_kind(self) -> str:
        """engines.base.RESPONSES: how this client's responses come."""
        if self.endpoint == "embeddings":
            return "embedding"
        return "stream" if self.streaming else "whole"

    def _body(self, request: Request) -> dict[str, Any]:
        s = request.sampling
        if self.endpoint == "embeddings":
            return {"model": self.model, "input": self._prompt(request), "encoding_format": "float"}
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "stream": self.stream_responses,
        }
        if self.stream_responses:
            body["stream_options"] = {"include_usage": True}
        if self.n != 1:
            body["n"] = self.n
        if self.best_of is not None:
            body["best_of"] = self.best_of
        if s.top_k:
            body["top_k"] = s.top_k
        if s.seed is not None:
            body["seed"] = s.seed
        if s.ignore_eos:
            body["ignore_eos"] = True  # an extra field; vLLM, SGLang, llmperf-serve honour it
        if s.stop_token_ids:
            body["stop_token_ids"] = list(s.stop_token_ids)
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": self._prompt_text(request)}]
        else:
            body["prompt"] = self._prompt(request)
        return body

    def _prompt(self, request: Request) -> str | list[int]:
        if self.prompt_format == "token_ids" and request.prompt_token_ids is not None:
            return list(request.prompt_token_ids)
        return self._prompt_text(request)

    def _prompt_text(self, request: Request) -> str:
        if request.prompt_text is not None:
            return request.prompt_text
        return self.tokenizer.decode(list(request.prompt_token_ids))

    def _final_event(self, request: Request, state: StreamState) -> TokenEvent:
        now = time.perf_counter()
        if state.finish_reason is None and not state.done:
            return state.end(now, "error", "the server closed the stream before it finished")
        usage = state.usage or {}
        num_output = usage.get("completion_tokens")
        num_prompt = usage.get("prompt_tokens")
        if self.endpoint == "embeddings":
            num_output = 0  # an embedding has no output tokens
        source = "server usage"
        if num_output is None or num_prompt is None:
            source = self.local_count_source
        if num_output is None:
            num_output = len(self.tokenizer.encode("".join(state.texts)))
        if num_prompt is None:
            num_prompt = len(request.prompt_ids(self.tokenizer))
        return TokenEvent(
            request_id=request.id,
            token_ids=(),
            time_s=now,
            finished=True,
            finish_reason=state.finish_reason or "stop",
            num_prompt_tokens=num_prompt,
            num_output_tokens=num_output,
            received_s=now,
            token_count_source=source,
        )

    @property
    def local_count_source(self) -> str:
        """How this client counts tokens the server did not: a tokenizer.json, else bytes."""
        return "bytes" if isinstance(self.tokenizer, ByteTokenizer) else "tokenizer"


def load_client_tokenizer(path: str | None) -> Tokenizer:
    """A tokenizer.json (a file, or a folder holding one); None: bytes as ids 3..258."""
    if path is None:
        return ByteTokenizer(256 + BYTE_OFFSET)
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        raise FileNotFoundError(f"tokenizer {path!r}: no tokenizer.json there")
    return HFTokenizer(file, None, _eos_token_ids(file.parent))


def _eos_token_ids(folder: Path) -> tuple[int, ...]:
    config = folder / "config.json"
    if not config.is_file():
        return ()
    eos = json.loads(config.read_text(encoding="utf-8")).get("eos_token_id")
    return tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
