"""An engine that streams from any OpenAI-compatible server: vLLM, SGLang, TGI, llama.cpp, llmperf-serve.

What differs between APIs (the path, the body, the key's header, the stream's events) is the
endpoint's (`engine.endpoint`, engines/endpoints/: completions, chat, responses, messages,
embeddings); this module is the request's path: the connection, the timing and the final event.

HTTP goes through a transport (`engine.transport`: aiohttp, the default, or httpx;
engines/transports/), one client per event loop with keep-alive connections, as many as
`max_connections`. By default it runs on the load generator's own loop: each chunk is read,
split and parsed where it is consumed, with no thread hop between the socket and the record.
`engine.http_thread=true` runs it on a thread of its own instead (the design before this
one): a loop of the engine's that a busy load-generator loop cannot delay, at the cost of a
hand-off per event (engines/channel.py's mailbox). docs/harness.md, "The client", has both
measured.

Each read's bytes are split into SSE events (`SSEDecoder`) and parsed with orjson; each
chunk becomes a `TokenEvent` stamped when its bytes arrived (`received_s`, which the load
generator takes as the token's time). The final event carries the usage chunk's counts
(`stream_options.include_usage`), or, when the server sends none, the output text's length
in tokens of the local tokenizer (bytes without a tokenizer.json), and says which
(`token_count_source`: "server usage", "tokenizer" or "bytes"). A server error, a timeout or
a dropped connection ends the request with finish_reason "error" and the reason (each chunk
received counts as one output token); nothing raises into the caller.

Chunks and tokens: servers send about one token per chunk, but not always its
text (a partial character, a special token), so each chunk counts as one token
arrival. Its `token_ids` are the local tokenizer's ids for the chunk's text, or
`(UNKNOWN_TOKEN_ID,)` when the text is empty; an end marker (a finish reason with no text)
is not a token. With `n` > 1 each event carries its choice's `index` (`TokenEvent.choice`),
and the usage counts every choice's tokens.

Whole responses (`stream=False`) and embeddings deliver only the final event (`response`
"whole" or "embedding"): no token times, so no TTFT or ITL, and counts from `usage`.

The transport stamps each request's connection-pool wait (handed to it until it started on
a connection: the queue the client's own pool adds when `max_connections` is below the
requests in flight), when its last byte was written (`written_s`) and when the response's
headers came (`headers_s`), on the final event: from the intended arrival to the second,
the client's own part of a request (its figure `client_send_s`); from there to the third,
the network and the server's work before it answers (`headers_wait_s`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import orjson

from engines.base import EngineCapabilities, Request, TokenEvent, Tokenizer
from engines.channel import EventChannel, EventMailbox
from engines.client_tokenizer import load_client_tokenizer
from engines.endpoints import ENDPOINTS
from engines.openai_options import OpenAIEngineConfig
from engines.openai_stream import ChunkIds, ServerError, SSEDecoder, StreamState, error_message
from engines.reference.tokenizer import ByteTokenizer
from engines.served_model import served_model
from engines.transports import TRANSPORTS
from engines.transports.base import RequestTiming, Transport, TransportSettings

STOP_TIMEOUT_S = 10.0
DONE = b"[DONE]"


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
        # The API spoken (engines/endpoints/): its path, bodies, headers and events
        self.api = ENDPOINTS.get(opts.endpoint)(model, opts, self.tokenizer)
        self.url = f"{self.base_url}/{self.api.path}"
        self.transport_name = opts.transport
        self._transport_class = TRANSPORTS.get(opts.transport)
        self.http_thread = opts.http_thread
        self._lock = threading.Lock()
        # One transport per event loop that streams (its connections belong to that loop)
        self._transports: dict[asyncio.AbstractEventLoop, Transport] = {}
        self._closers: dict[asyncio.AbstractEventLoop, AsyncIterator[None]] = {}
        self._stopping = False
        # http_thread: the engine's own loop, its thread and the requests running on it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task] = set()
        # Every stream's events to the caller's loop: first tokens and last events at once,
        # the tokens between at most 50 ms later (engines/channel.py)
        self._mailbox: EventMailbox | None = None
        self._chunk_ids = ChunkIds(self.tokenizer)

    # -- Engine protocol ---------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            self._stopping = False
            if not self.http_thread or self._thread is not None:
                return
            ready = threading.Event()
            self._thread = threading.Thread(
                target=self._run_loop, args=(ready,), name="openai-http", daemon=True
            )
            self._thread.start()
            ready.wait()

    def stop(self) -> None:
        """Ends open streams with finish_reason "abort" and closes the connections. Safe from
        any thread; a loop that has already closed took its connections with it."""
        with self._lock:
            self._stopping = True
            for loop, transport in list(self._transports.items()):
                if loop is self._loop:
                    continue
                if loop.is_closed():  # its connections closed with it
                    self._transports.pop(loop, None)
                    self._closers.pop(loop, None)
                    continue
                if _running_here(loop):  # stop() on the loop itself: close without waiting
                    loop.create_task(transport.close())
                elif loop.is_running():
                    asyncio.run_coroutine_threadsafe(transport.close(), loop).result(STOP_TIMEOUT_S)
                self._transports.pop(loop, None)
                self._closers.pop(loop, None)
            loop, thread = self._loop, self._thread
            if thread is None:
                return
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(STOP_TIMEOUT_S)
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            self._transports.pop(loop, None)
            self._loop = self._thread = None

    async def aclose(self) -> None:
        """Closes the connections of the calling loop's transport (the load generator calls it
        before its loop ends); the next stream on any loop opens new ones."""
        loop = asyncio.get_running_loop()
        transport = self._transports.pop(loop, None)
        self._closers.pop(loop, None)
        if transport is not None:
            await transport.close()

    def stream(self, request: Request) -> AsyncIterator[TokenEvent]:
        # The events' generator itself, not a generator around it: each layer costs every chunk
        return self._threaded(request) if self.http_thread else self._events(request)

    async def _threaded(self, request: Request) -> AsyncIterator[TokenEvent]:
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

    # -- one request, on whichever loop runs it --------------------------------------------

    async def _transport(self) -> Transport:
        loop = asyncio.get_running_loop()
        transport = self._transports.get(loop)
        if transport is None:
            headers = {"Content-Type": "application/json", **self.api.auth_headers(self.api_key),
                       **(self.opts.headers or {})}
            transport = self._transport_class(TransportSettings(
                self.max_connections, self.connect_timeout_s, self.request_timeout_s, headers))
            self._transports[loop] = transport
            # Closed with the loop: asyncio.run (and the load generator's loop) finalizes the
            # async generators still open when its main coroutine ends, this one among them.
            closer = self._closers[loop] = _close_at_loop_end(transport)
            await closer.__anext__()
        return transport

    async def _events(self, request: Request) -> AsyncIterator[TokenEvent]:
        """The request's events, ending with its final one whatever happens (but the caller
        leaving): a failure is that event's error, never an exception."""
        state = StreamState(request)
        timing = RequestTiming(time.perf_counter())
        deadline = asyncio.get_running_loop().time() + self.request_timeout_s
        transport = await self._transport()
        body, headers = orjson.dumps(self._body(request)), {"X-Request-Id": request.id}
        try:
            # The deadline's timer cancels whatever this task awaits when it fires; the caller
            # awaits only this stream between events, so it lands here and is taken as a timeout.
            async with asyncio.timeout_at(deadline):
                async with transport.post(self.url, body, headers, timing) as response:
                    if response.status >= 400:
                        raise ServerError(f"HTTP {response.status}: {error_message(await response.read())}")
                    if not self.streaming:
                        self.api.on_whole(state, orjson.loads(await response.read()), time.perf_counter())
                    else:
                        decoder, chunk_ids, on_chunk = SSEDecoder(), self._chunk_ids, self.api.parser(state)
                        async for data in response.chunks():
                            now = time.perf_counter()
                            for payload in decoder.feed(data):
                                if payload == DONE:
                                    state.done = True  # read on to the end: the connection is reused
                                    continue
                                for event in on_chunk(orjson.loads(payload), now, chunk_ids):
                                    yield event
            for event in state.settle():  # end markers the usage counts as tokens
                yield event
            final = self._final_event(request, state)
        except Exception as err:  # noqa: BLE001 - every failure is this request's, not the run's
            final = state.end(time.perf_counter(), *self._failure(err, transport, state, deadline))
        yield replace(final, pool_wait_s=timing.pool_wait_s, connect_s=timing.connect_s,
                      written_s=timing.written_s, headers_s=timing.headers_s,
                      response=self.response_kind)

    def _failure(self, err: Exception, transport: Transport, state: StreamState,
                 deadline: float) -> tuple[str, str]:
        """The finish reason and error of a request that raised `err`."""
        if self._stopping and state.finish_reason is None and not state.done:
            return "abort", "the engine stopped"  # stop() closed its connection
        kind = transport.classify(err)
        if isinstance(err, TimeoutError) or kind == "timeout":
            if asyncio.get_running_loop().time() >= deadline - 1e-3:
                return "error", f"timed out after {self.request_timeout_s} s"
            # connect_timeout_s, or no byte for request_timeout_s
            return "error", f"timeout: {type(err).__name__}: {err}"
        if kind == "connection":
            return "error", f"connection failed: {type(err).__name__}: {err}"
        if isinstance(err, ServerError):
            return "error", str(err)
        return "error", f"{type(err).__name__}: {err}"  # a malformed stream

    # -- the HTTP thread (http_thread=true) ------------------------------------------------

    def _run_loop(self, ready: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        ready.set()
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.aclose()

    async def _exchange(self, request: Request, deliver: Callable[[TokenEvent], None]) -> None:
        """One request on the engine's own loop; always delivers a final event."""
        task = asyncio.current_task()
        self._tasks.add(task)
        state_end = StreamState(request)  # the texts so far, for an aborted final event
        try:
            async for event in self._events(request):
                if event.token_ids:
                    state_end.texts.append(event.text or "")
                deliver(event)
        except asyncio.CancelledError:
            deliver(state_end.end(time.perf_counter(), "abort", "the engine stopped"))
            raise
        finally:
            self._tasks.discard(task)

    @property
    def streaming(self) -> bool:
        return self.api.stream

    @property
    def response_kind(self) -> str:
        """engines.base.RESPONSES: how this client's responses come."""
        return "stream" if self.streaming else self.api.whole_kind

    def _body(self, request: Request) -> dict[str, Any]:
        return self.api.body(request)

    def _final_event(self, request: Request, state: StreamState) -> TokenEvent:
        now = time.perf_counter()
        if state.finish_reason is None and not state.done:
            return state.end(now, "error", "the server closed the stream before it finished")
        usage = state.usage or {}
        num_output = usage.get("completion_tokens")
        num_prompt = usage.get("prompt_tokens")
        if not self.api.has_output:
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
            # another API's usage, normalized by its endpoint; chat's details as llmperf-serve sends them
            image_tokens=usage.get("image_tokens", (usage.get("prompt_tokens_details") or {}).get("image_tokens")),
        )

    @property
    def local_count_source(self) -> str:
        """How this client counts tokens the server did not: a tokenizer.json, else bytes."""
        return "bytes" if isinstance(self.tokenizer, ByteTokenizer) else "tokenizer"


def _running_here(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


async def _close_at_loop_end(transport: Transport) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await transport.close()
