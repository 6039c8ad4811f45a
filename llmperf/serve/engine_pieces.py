"""What an engine's events become in a response: one `Piece` per event of a choice that
carries tokens or the end, detokenized as they come, with the request's timings kept on its
`ServedRequest`; n > 1 choices run as n engine requests side by side (`engine_choices`). The routes
in app.py shape the pieces into each API's chunks, events or whole body."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio

from engines.base import Engine, Request
from llmperf.serve.detokenize import IncrementalDetokenizer
from llmperf.serve.error_responses import internal_error
from llmperf.serve.protocol import GenerationSpec, OpenAIError
from llmperf.serve.request_log import ServedRequest


@dataclass(frozen=True)
class Piece:
    """What one engine event adds to choice `index`: its text, the end, reasoning or answer."""

    index: int
    text: str
    finish_reason: str | None
    reasoning: bool = False
    carries_token: bool = True  # False: an end with no token of its own


async def engine_choices(engine: Engine, tokenizer, spec: GenerationSpec,
                         served: ServedRequest) -> AsyncIterator[Piece]:
    """The pieces of every choice, as they come: n > 1 runs n engine requests side by side."""
    if spec.n == 1:
        async for piece in pieces(engine, tokenizer, spec, served, 0):
            yield piece
        return
    queue: asyncio.Queue[Piece | BaseException | None] = asyncio.Queue()

    async def pump(index: int) -> None:
        try:
            async for piece in pieces(engine, tokenizer, spec, served, index):
                await queue.put(piece)
        except Exception as err:
            await queue.put(err)
        finally:
            await queue.put(None)

    tasks = [asyncio.ensure_future(pump(i)) for i in range(spec.n)]
    try:
        ended = 0
        while ended < spec.n:
            item = await queue.get()
            if item is None:
                ended += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(*tasks, return_exceptions=True)


async def pieces(
    engine: Engine, tokenizer, spec: GenerationSpec, served: ServedRequest, index: int
) -> AsyncIterator[Piece]:
    """One piece per engine event of choice `index` that carries tokens or the end;
    records timings (a choice's tokens add to the request's)."""
    sampling = spec.sampling
    if index and sampling.seed is not None:  # choices differ when sampled with a seed
        sampling = dataclasses.replace(sampling, seed=sampling.seed + index)
    request = Request(
        id=served.id if spec.n == 1 else f"{served.id}-{index}",
        max_tokens=spec.max_tokens,
        prompt_token_ids=spec.prompt_token_ids,
        sampling=sampling,
    )
    detokenizer = IncrementalDetokenizer(tokenizer)
    stream = engine.stream(request)
    try:
        async for event in stream:
            if event.scheduled_s is not None:
                served.scheduled_s = served.scheduled_s or event.scheduled_s
            text = ""
            if event.token_ids:
                served.first_token_s = served.first_token_s or event.time_s
                served.last_token_s = max(served.last_token_s or event.time_s, event.time_s)
                served.num_output_tokens += len(event.token_ids)
                text = detokenizer.add(event.token_ids)
            if event.finished:
                served.finish_reason = event.finish_reason
                served.error = event.error
                if event.error:
                    raise OpenAIError(event.error, status=500, type="server_error")
                yield Piece(index, text + detokenizer.flush(), event.finish_reason, event.reasoning,
                            bool(event.token_ids))
                return
            if event.token_ids:
                yield Piece(index, text, None, event.reasoning)
    except OpenAIError:
        raise
    except Exception as err:  # the engine raised instead of ending with an error event
        error = internal_error(err)
        served.finish_reason, served.error = "error", error.message
        raise error from err
    finally:
        with anyio.CancelScope(shield=True):  # runs even while the response is being cancelled
            await stream.aclose()
