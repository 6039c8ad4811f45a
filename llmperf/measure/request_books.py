"""One request's books: its record opened at dispatch, each event the engine streams booked
into it, and the record closed when the stream ends (llmperf/measure/loadgen.py sends the
request and stamps each event; this module only writes down what the events say)."""

from __future__ import annotations

from engines.base import Request, TokenEvent
from llmperf.measure.records import EMPTY_OUTPUT, RequestRecord


def open_record(request: Request, arrival_s: float, dispatch_s: float, client_queue_s: float,
                stage: int) -> RequestRecord:
    """The record of `request`, sent at `dispatch_s` for its intended `arrival_s`."""
    return RequestRecord(
        id=request.id,
        arrival_s=arrival_s,
        dispatch_s=dispatch_s,
        first_token_s=None,
        end_s=0.0,
        input_tokens=len(request.prompt_token_ids or ()),
        warmup=request.is_warmup,
        session_id=request.session_id,
        turn=request.turn,
        shared_prefix_tokens=request.shared_prefix_tokens,
        image_bytes=sum(map(len, request.images)),
        client_queue_s=client_queue_s,
        stage=stage,
    )


def book_tokens(record: RequestRecord, event: TokenEvent, received_s: float,
                output_ids: list[int]) -> bool:
    """Book the tokens of `event`, received at `received_s`; True when they are the first."""
    if not event.token_ids:
        return False
    first = not record.token_times_s
    record.token_times_s.append(received_s)
    _note_chunk(record, len(event.token_ids))
    _note_choice(record, event.choice)
    record.output_tokens += len(event.token_ids)
    output_ids.extend(event.token_ids)
    if event.reasoning:
        record.reasoning_tokens += len(event.token_ids)
    elif record.first_answer_token_s is None:
        record.first_answer_token_s = received_s
    return first


def book_finish(record: RequestRecord, event: TokenEvent, written_s: float | None,
                headers_s: float | None) -> None:
    """Book the stream's last event: how it ended, the server's counts, and the transport's
    stamps (`written_s`, `headers_s`: the event's, already on the records' clock)."""
    record.finish_reason = event.finish_reason
    record.error = event.error
    record.input_tokens = event.num_prompt_tokens or record.input_tokens
    if event.num_output_tokens is not None:  # 0 too: a server's usage
        record.output_tokens = event.num_output_tokens
    record.response = event.response
    record.pool_wait_s = event.pool_wait_s
    record.connect_s = event.connect_s
    record.written_s, record.headers_s = written_s, headers_s
    record.image_tokens = event.image_tokens
    if event.error is None:
        record.token_count_source = event.token_count_source or "engine"


def close_record(record: RequestRecord, last_event_s: float) -> None:
    """First and last token times from the booked ones; a clean end without a token failed."""
    times = record.token_times_s
    record.first_token_s = times[0] if times else None
    record.end_s = times[-1] if times else last_event_s
    # Every request asks for at least one token; a clean end without one gave the
    # user nothing, and must not count toward throughput or goodput.
    if record.error is None and record.output_tokens == 0 and record.response != "embedding":
        record.error = EMPTY_OUTPUT


def _note_chunk(record: RequestRecord, num_tokens: int) -> None:
    if record.chunk_tokens is not None:
        record.chunk_tokens.append(num_tokens)
    elif num_tokens > 1:  # the first multi-token chunk: the earlier ones held one token each
        record.chunk_tokens = [1] * (len(record.token_times_s) - 1) + [num_tokens]


def _note_choice(record: RequestRecord, choice: int) -> None:
    if record.token_choices is not None:
        record.token_choices.append(choice)
    elif choice:  # the first token of another choice: the earlier ones were choice 0
        record.token_choices = [0] * (len(record.token_times_s) - 1) + [choice]
