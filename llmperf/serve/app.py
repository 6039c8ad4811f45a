"""The OpenAI-compatible HTTP app over one engine (Starlette; run by uvicorn).

The engine's step loop runs on its own thread and hands events to this event
loop; each response streams them as they come. A client that disconnects
aborts its request in the engine. Every request ends as a `ServedRequest` in
the metrics (and the request log when one is set).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from jinja2.exceptions import TemplateError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engines.base import Engine
from llmperf.serve.chat_template import DEFAULT_CHAT_TEMPLATE, compile_chat_template
from llmperf.serve.embeddings import embedding_response, parse_embedding
from llmperf.serve.engine_pieces import engine_choices
from llmperf.serve.engine_view import context_limit, engine_is_alive, engine_load
from llmperf.serve.error_responses import (
    http_error_response,
    internal_error,
    openai_error_response,
    server_error_response,
)
from llmperf.serve.messages_api import MessagesShapes, parse_messages
from llmperf.serve.prometheus_metrics import CONTENT_TYPE, ServerMetrics
from llmperf.serve.protocol import (
    GenerationSpec,
    Limits,
    OpenAIError,
    parse_body,
    parse_chat,
    parse_completion,
)
from llmperf.serve.request_log import RequestLog, ServedRequest
from llmperf.serve.response_shapes import Choice, ResponseShapes, sse
from llmperf.serve.responses_api import ResponsesShapes, parse_responses

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# The APIs whose streams are typed events (not OpenAI chunks): their parser and their shapes
TYPED_APIS = {
    "responses": (parse_responses, ResponsesShapes, "resp"),
    "messages": (parse_messages, MessagesShapes, "msg"),
}


class ClosingStreamingResponse(StreamingResponse):
    """Closes its body generator however the response ends, so the request is finished and
    aborted in the engine right away, not when the generator is garbage-collected."""

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()


class OpenAIServer:
    """Route handlers and the state they share: engine, limits, metrics, log."""

    def __init__(
        self,
        engine: Engine,
        served_model_name: str,
        api_key: str | None = None,
        request_log: RequestLog | None = None,
        render_chat: Callable[[list[dict]], str] | None = None,
    ):
        self.engine = engine
        self.served_model_name = served_model_name
        self.api_key = api_key
        self.request_log = request_log
        self.render_chat = render_chat or compile_chat_template(DEFAULT_CHAT_TEMPLATE, {})
        self.tokenizer = engine.tokenizer
        self.limits = Limits(
            max_context_tokens=context_limit(engine), vocab_size=self.tokenizer.vocab_size
        )
        self.metrics = ServerMetrics(served_model_name)
        self.created = int(time.time())

    # -- routes ----------------------------------------------------------------------------

    async def completions(self, http: HTTPRequest) -> Response:
        return await self._generate(http, "completions")

    async def chat_completions(self, http: HTTPRequest) -> Response:
        return await self._generate(http, "chat")

    async def responses(self, http: HTTPRequest) -> Response:
        return await self._generate(http, "responses")

    async def messages(self, http: HTTPRequest) -> Response:
        return await self._generate(http, "messages")

    async def embeddings(self, http: HTTPRequest) -> Response:
        """A deterministic embedding of the input's tokens (llmperf/serve/embeddings.py)."""
        self._authorize(http)
        model, ids = parse_embedding(
            parse_body(await http.body()), self.served_model_name, self.tokenizer, self.limits
        )
        return JSONResponse(embedding_response(model, ids))

    async def models(self, http: HTTPRequest) -> Response:
        self._authorize(http)
        model = {
            "id": self.served_model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "llmperf",
            "max_model_len": self.limits.max_context_tokens,
        }
        return JSONResponse({"object": "list", "data": [model]})

    async def health(self, http: HTTPRequest) -> Response:
        if not engine_is_alive(self.engine):
            return JSONResponse({"status": "engine stopped"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def prometheus(self, http: HTTPRequest) -> Response:
        load = engine_load(self.engine, self.metrics.num_in_flight)
        return Response(self.metrics.render(load), headers={"Content-Type": CONTENT_TYPE})

    # -- generation ------------------------------------------------------------------------

    async def _generate(self, http: HTTPRequest, endpoint: str) -> Response:
        arrival_s, arrival_unix_s = time.perf_counter(), time.time()
        self._authorize(http)
        if not engine_is_alive(self.engine):
            raise OpenAIError(
                "the engine has stopped; see the server's log", status=503, type="server_error"
            )
        body = parse_body(await http.body())
        try:
            if endpoint in TYPED_APIS:
                spec = TYPED_APIS[endpoint][0](
                    body, self.served_model_name, self.tokenizer, self.limits, self.render_chat
                )
            elif endpoint == "chat":
                spec = parse_chat(
                    body, self.served_model_name, self.tokenizer, self.limits, self.render_chat
                )
            else:
                spec = parse_completion(body, self.served_model_name, self.tokenizer, self.limits)
        except TemplateError as err:
            raise OpenAIError(
                f"the chat template failed on these messages: {err}", param="messages"
            ) from None
        prefix = TYPED_APIS[endpoint][2] if endpoint in TYPED_APIS else (
            "chatcmpl" if endpoint == "chat" else "cmpl")
        served = ServedRequest(
            id=f"{prefix}-{uuid.uuid4().hex}",
            endpoint=endpoint,
            arrival_s=arrival_s,
            arrival_unix_s=arrival_unix_s,
            client_request_id=http.headers.get("x-request-id"),
            num_prompt_tokens=len(spec.prompt_token_ids),
        )
        if spec.stream:
            stream = self._typed_stream if endpoint in TYPED_APIS else self._stream
            return ClosingStreamingResponse(
                stream(spec, served), media_type="text/event-stream", headers=SSE_HEADERS
            )
        return await self._whole(http, spec, served)

    async def _stream(self, spec: GenerationSpec, served: ServedRequest) -> AsyncIterator[bytes]:
        """SSE body. Cancelled by Starlette when the client disconnects (which aborts the request)."""
        shapes = ResponseShapes(spec, served.id)
        pieces = engine_choices(self.engine, self.tokenizer, spec, served)
        self.metrics.num_in_flight += 1
        try:
            try:
                async for piece in pieces:
                    chunks = shapes.chunks(piece.text, piece.finish_reason, piece.index, piece.reasoning)
                    yield b"".join(sse(c) for c in chunks)
                if spec.include_usage:
                    yield sse(
                        shapes.usage_chunk(served.num_prompt_tokens, served.num_output_tokens)
                    )
            except OpenAIError as err:  # after the 200 headers: the error travels as an event
                yield sse(err.to_dict())
            except Exception as err:  # a fault of ours: the client still gets an error and [DONE]
                yield sse(internal_error(err).to_dict())
            yield sse("[DONE]")
        finally:
            with anyio.CancelScope(shield=True):
                await pieces.aclose()
            self._finish(served)

    async def _typed_stream(self, spec: GenerationSpec, served: ServedRequest) -> AsyncIterator[bytes]:
        """The typed events of the Responses and Messages APIs (responses_api.py, messages_api.py)."""
        shapes = TYPED_APIS[spec.endpoint][1](spec, served.id)
        pieces = engine_choices(self.engine, self.tokenizer, spec, served)
        self.metrics.num_in_flight += 1
        try:
            yield shapes.opening(served.num_prompt_tokens)
            try:
                async for piece in pieces:
                    yield shapes.piece(piece.text, piece.reasoning, piece.carries_token)
                yield shapes.closing(served.num_prompt_tokens, served.num_output_tokens,
                                     served.finish_reason)
            except OpenAIError as err:  # after the 200 headers: the error travels as an event
                yield shapes.error(err)
            except Exception as err:
                yield shapes.error(internal_error(err))
        finally:
            with anyio.CancelScope(shield=True):
                await pieces.aclose()
            self._finish(served)

    async def _whole(
        self, http: HTTPRequest, spec: GenerationSpec, served: ServedRequest
    ) -> Response:
        choices = [Choice(i) for i in range(spec.n)]

        async def collect() -> None:
            async for piece in engine_choices(self.engine, self.tokenizer, spec, served):
                choice = choices[piece.index]
                if piece.reasoning:
                    choice.reasoning += piece.text
                else:
                    choice.text += piece.text
                choice.finish_reason = piece.finish_reason or choice.finish_reason

        self.metrics.num_in_flight += 1
        work = asyncio.ensure_future(collect())
        gone = asyncio.ensure_future(wait_for_disconnect(http))
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when this handler is cancelled: neither task may outlive it
            gone.cancel()
            work.cancel()  # nobody is left to answer, if it is still running
            with anyio.CancelScope(shield=True):
                await asyncio.gather(work, gone, return_exceptions=True)
            self._finish(served)
        if work.cancelled():
            return Response(status_code=499)
        work.result()
        if spec.endpoint in TYPED_APIS:
            typed = TYPED_APIS[spec.endpoint][1](spec, served.id)
            return JSONResponse(typed.whole(choices[0], served.num_prompt_tokens, served.num_output_tokens))
        shapes = ResponseShapes(spec, served.id)
        return JSONResponse(
            shapes.whole(choices, served.num_prompt_tokens, served.num_output_tokens)
        )

    def _finish(self, served: ServedRequest) -> None:
        self.metrics.num_in_flight -= 1
        if served.finish_reason is None:
            served.finish_reason = "abort"  # the client went away first
        self.metrics.on_finished(served)
        if self.request_log is not None:
            self.request_log.write(served)

    def _authorize(self, http: HTTPRequest) -> None:
        if self.api_key is None:
            return
        given = http.headers.get("x-api-key") or http.headers.get("authorization", "")
        given = given.removeprefix("Bearer ").strip()  # x-api-key: Anthropic's clients
        if not hmac.compare_digest(given.encode(), self.api_key.encode()):
            raise OpenAIError("Incorrect API key provided.", status=401, code="invalid_api_key")


async def wait_for_disconnect(http: HTTPRequest) -> None:
    while (await http.receive())["type"] != "http.disconnect":
        pass


def build_app(server: OpenAIServer, manage_engine: bool = True) -> Starlette:
    """The Starlette app. With `manage_engine`, the app starts the engine and stops it on shutdown."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        if manage_engine:
            server.engine.start()
        try:
            yield {}
        finally:
            if manage_engine:
                server.engine.stop()
            if server.request_log is not None:
                server.request_log.close()

    routes = [
        Route("/v1/completions", server.completions, methods=["POST"]),
        Route("/v1/chat/completions", server.chat_completions, methods=["POST"]),
        Route("/v1/responses", server.responses, methods=["POST"]),
        Route("/v1/messages", server.messages, methods=["POST"]),
        Route("/v1/embeddings", server.embeddings, methods=["POST"]),
        Route("/v1/models", server.models, methods=["GET"]),
        Route("/health", server.health, methods=["GET"]),
        Route("/metrics", server.prometheus, methods=["GET"]),
    ]
    handlers = {OpenAIError: openai_error_response, HTTPException: http_error_response, Exception: server_error_response}
    return Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
