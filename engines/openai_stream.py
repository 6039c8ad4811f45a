"""What an OpenAI-compatible server's responses say, chunk by chunk: the text, reasoning,
finish reason and usage of each choice, and the error shapes servers use. `OpenAIEngine`
(engines/openai_http.py) feeds each SSE chunk or whole body to a `StreamState` and sends
on the `TokenEvent`s it returns.

Chunks and tokens: each chunk counts as one token arrival; its `token_ids` are the local
tokenizer's ids for its text, or `(UNKNOWN_TOKEN_ID,)` when the text is empty.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engines.base import Request, TokenEvent, Tokenizer

UNKNOWN_TOKEN_ID = -1  # a chunk whose text is empty: a token arrived, its id is not known
MAX_ERROR_CHARS = 500


class ChunkIds:
    """The local tokenizer's ids for a chunk's text, remembered: a stream's chunks hold about
    one token's text each, and the same texts come back again and again, so a dict lookup
    replaces most calls into the tokenizer (11% of the HTTP thread's time before). A text's
    ids do not depend on what came before it, so the figures do not change."""

    def __init__(self, tokenizer: Tokenizer, max_entries: int = 1 << 16) -> None:
        self.tokenizer = tokenizer
        self.max_entries = max_entries
        self._ids: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> tuple[int, ...]:
        ids = self._ids.get(text)
        if ids is None:
            ids = tuple(self.tokenizer.encode(text))
            if len(self._ids) < self.max_entries:
                self._ids[text] = ids
        return ids


class SSEDecoder:
    """Server-sent events, split from the raw bytes a transport hands over: each `feed`
    returns the `data:` payloads its bytes completed (a payload split across two reads
    comes whole with the second). Blank lines, comments and `event:` lines are dropped;
    both LF and CRLF line ends are taken."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        if not buffer and data[-1:] == b"\n":  # the usual read: whole events, nothing held
            lines = data.split(b"\n")
        else:
            buffer += data
            end = buffer.rfind(b"\n")
            if end < 0:
                return []
            lines = bytes(buffer[:end]).split(b"\n")
            del buffer[: end + 1]
        return [line[5:].strip() for line in lines if line[:5] == b"data:"]


class ServerError(Exception):
    """The server answered with an error status or an error event."""


@dataclass
class StreamState:
    """What one response has said so far."""

    request: Request
    texts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    done: bool = False
    pool_wait_s: float | None = None  # handed to httpx until it started on a connection
    written_s: float | None = None  # perf_counter(): the request's last byte written
    headers_s: float | None = None  # perf_counter(): the response's headers received
    arrivals: int = 0  # token-carrying chunks so far
    # End markers (a finish reason, no text): a token whose text is empty, or no token at all.
    # The usage tells which (`settle`); without usage, none is a token.
    held: list[TokenEvent] = field(default_factory=list)

    def settle(self) -> list[TokenEvent]:
        """The held end markers that were tokens: as many as the server's usage counts beyond
        the chunks that carried text."""
        count = (self.usage or {}).get("completion_tokens")
        if not self.held or not isinstance(count, int) or count <= self.arrivals:
            return []
        tokens = self.held[: count - self.arrivals]
        self.arrivals += len(tokens)
        self.texts.extend("" for _ in tokens)
        return tokens

    def on_chunk(self, chunk: dict[str, Any], now: float, tokenizer: Tokenizer | ChunkIds) -> list[TokenEvent]:
        if "error" in chunk:
            raise ServerError(f"error event: {error_message(json.dumps(chunk))}")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        events = []
        for choice in chunk.get("choices") or ():
            index = choice.get("index") or 0
            text = choice_text(choice)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            if text is None and is_end_marker(choice):
                self.held.append(TokenEvent(self.request.id, (UNKNOWN_TOKEN_ID,), now, text="",
                                            received_s=now, choice=index))
                continue
            thought = reasoning_text(choice)
            if thought:
                self.texts.append(thought)
                ids = tuple(tokenizer.encode(thought)) or (UNKNOWN_TOKEN_ID,)
                events.append(TokenEvent(self.request.id, ids, now, text=thought, received_s=now,
                                         reasoning=True, choice=index))
                self.arrivals += 1
            if text is None:
                continue
            self.texts.append(text)
            ids = tuple(tokenizer.encode(text)) if text else ()
            events.append(TokenEvent(self.request.id, ids or (UNKNOWN_TOKEN_ID,), now, text=text,
                                     received_s=now, choice=index))
            self.arrivals += 1
        return events

    def token(self, text: str, now: float, tokenizer: Tokenizer | ChunkIds,
              reasoning: bool = False) -> TokenEvent:
        """One token-carrying event of an API whose events hold one piece of text each
        (Responses, Messages): its ids are the local tokenizer's, as for a chunk."""
        self.texts.append(text)
        self.arrivals += 1
        ids = tuple(tokenizer.encode(text)) if text else ()
        return TokenEvent(self.request.id, ids or (UNKNOWN_TOKEN_ID,), now, text=text,
                          received_s=now, reasoning=reasoning)

    def on_whole(self, body: dict[str, Any], endpoint: str, now: float) -> None:
        """A whole response: its choices' text (or its embedding) and usage."""
        if "error" in body:
            raise ServerError(f"error body: {error_message(json.dumps(body))}")
        self.usage = body.get("usage") or None
        self.done = True
        if endpoint == "embeddings":
            data = body.get("data") or []
            if not data or not isinstance(data[0].get("embedding"), list):
                raise ServerError("the response holds no embedding")
            return
        for choice in body.get("choices") or ():
            message = choice.get("message") or {}
            text = choice.get("text") if "text" in choice else message.get("content")
            self.texts.append((message.get("reasoning_content") or "") + (text or ""))
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def end(self, now: float, reason: str, error: str | None) -> TokenEvent:
        """The final event of a response cut short: each chunk received counts as one token."""
        return TokenEvent(
            self.request.id,
            (),
            now,
            finished=True,
            finish_reason=reason,
            error=error,
            num_output_tokens=len(self.texts),
            received_s=now,
        )


def choice_text(choice: dict[str, Any]) -> str | None:
    """The text a choice adds, or None when it carries no token: chat's role announcement,
    and the end marker (a finish reason with empty text), which every server may send as a
    chunk of its own. An empty text without a finish reason is a token whose text is not
    known yet (a partial character)."""
    if "delta" not in choice:
        text = choice.get("text")
        if not text and choice.get("finish_reason") is not None:
            return None  # the end marker: a finish reason with no text is not a token
        return text
    delta = choice["delta"] or {}
    content = delta.get("content") or ""
    if content:
        return content
    if choice.get("finish_reason") is not None:
        return None  # the end marker, its delta empty or absent
    if delta.get("role") or reasoning_text(choice):
        return None  # the role announcement; a reasoning delta (counted by reasoning_text)
    return content


def is_end_marker(choice: dict[str, Any]) -> bool:
    """A finish reason with no text and no reasoning."""
    if choice.get("finish_reason") is None or reasoning_text(choice):
        return False
    if "delta" not in choice:
        return not choice.get("text")
    return not (choice["delta"] or {}).get("content")


def reasoning_text(choice: dict[str, Any]) -> str:
    """The reasoning a chat delta adds: vLLM's and DeepSeek's `reasoning_content`, or the
    `reasoning` field of newer servers; empty when none."""
    delta = choice.get("delta") or {}
    return delta.get("reasoning_content") or delta.get("reasoning") or ""


def error_message(raw: bytes | str) -> str:
    """The message of an error body in the shapes servers use (OpenAI, vLLM, TGI, FastAPI)."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:MAX_ERROR_CHARS]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            err = err.get("message") or err.get("detail") or err
        message = err if isinstance(err, str) else body.get("message") or body.get("detail") or body
        return str(message)[:MAX_ERROR_CHARS]
    return text.strip()[:MAX_ERROR_CHARS]
