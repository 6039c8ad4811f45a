"""The OpenAI wire format: request parsing with OpenAI-style errors (the response shapes are
response_shapes.py's).

Parsing turns a JSON body into a `GenerationSpec` (prompt token ids, max_tokens,
sampling) or raises `OpenAIError`, which the app sends as
`{"error": {"message", "type", "param", "code"}}` with its 4xx status.
Fields this server does not use (logprobs, user, ...) are ignored, as vLLM does;
values it cannot honour (stop strings, best_of other than n) are refused. `n` choices are
n engine requests, streamed interleaved and told apart by each chunk's `index`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engines.base import SEED_RANGE, SamplingParams, Tokenizer
from llmperf.serve.images import IMAGE_TOKEN_ID, part_image_tokens

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
MAX_TEMPERATURE = 2.0  # OpenAI's range is [0, 2]


class OpenAIError(Exception):
    """An error the client caused (or a server fault), in OpenAI's error shape."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.type = type

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass
class GenerationSpec:
    """What a completions or chat request asks the engine to do."""

    endpoint: str  # "completions" or "chat"
    model: str
    prompt_token_ids: list[int]
    max_tokens: int
    sampling: SamplingParams
    stream: bool
    include_usage: bool
    n: int = 1  # choices: each one an engine request
    image_tokens: int = 0  # of the prompt's tokens, the images' placeholders (llmperf/serve/images.py)


@dataclass
class Limits:
    """What the served engine can take: context positions and vocabulary."""

    max_context_tokens: int
    vocab_size: int


# -- parsing ---------------------------------------------------------------------------


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise OpenAIError(f"the request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise OpenAIError(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def parse_completion(
    body: dict, served_model: str, tokenizer: Tokenizer, limits: Limits
) -> GenerationSpec:
    model = check_model(body, served_model)
    ids = prompt_token_ids(body.get("prompt"), tokenizer)
    max_tokens = _int_field(body, "max_tokens", COMPLETIONS_DEFAULT_MAX_TOKENS)
    return generation_spec(body, "completions", model, ids, max_tokens, "prompt", limits)


def parse_chat(
    body: dict,
    served_model: str,
    tokenizer: Tokenizer,
    limits: Limits,
    render_chat: Callable[[list[dict[str, str]]], str],
) -> GenerationSpec:
    model = check_model(body, served_model)
    messages, num_image_tokens = chat_messages(body.get("messages"))
    ids = [IMAGE_TOKEN_ID] * num_image_tokens + tokenizer.encode(render_chat(messages))
    if "max_completion_tokens" in body and body["max_completion_tokens"] is not None:
        max_tokens = _int_field(body, "max_completion_tokens", None)
    else:
        max_tokens = _int_field(body, "max_tokens", None)
    if max_tokens is None:  # chat's default: whatever room the context leaves
        max_tokens = max(1, limits.max_context_tokens - len(ids))
    spec = generation_spec(body, "chat", model, ids, max_tokens, "messages", limits)
    spec.image_tokens = num_image_tokens
    return spec


def generation_spec(body, endpoint, model, ids, max_tokens, prompt_param, limits: Limits) -> GenerationSpec:
    if not ids:
        raise OpenAIError(f"the {prompt_param} is empty", param=prompt_param)
    bad = next((t for t in ids if not 0 <= t < limits.vocab_size), None)
    if bad is not None:
        raise OpenAIError(
            f"token id {bad} is outside the vocabulary (size {limits.vocab_size})",
            param=prompt_param,
        )
    total = len(ids) + max_tokens
    if total > limits.max_context_tokens:
        raise OpenAIError(
            f"This model's maximum context length is {limits.max_context_tokens} tokens. However, you "
            f"requested {total} tokens ({len(ids)} in the {prompt_param}, {max_tokens} in the completion). "
            f"Please reduce the length of the {prompt_param} or completion.",
            param=prompt_param,
            code="context_length_exceeded",
        )
    stream = _bool_field(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise OpenAIError("stream_options must be an object", param="stream_options")
    include_usage = stream and bool((options or {}).get("include_usage", False))
    n = _int_field(body, "n", 1)
    best_of = _int_field(body, "best_of", None)
    if best_of is not None and best_of != n:
        raise OpenAIError(
            f"best_of={best_of} with n={n}: this server returns every choice it generates,"
            " so best_of must equal n", param="best_of")
    return GenerationSpec(
        endpoint=endpoint,
        model=model,
        prompt_token_ids=ids,
        max_tokens=max_tokens,
        sampling=_sampling(body),
        stream=stream,
        include_usage=include_usage,
        n=n,
    )


def check_model(body: dict, served_model: str) -> str:
    model = body.get("model")
    if model is None:
        raise OpenAIError("you must provide a model parameter", param="model")
    if model != served_model:
        raise OpenAIError(
            f"The model {model!r} does not exist; this server serves {served_model!r}",
            status=404,
            param="model",
            code="model_not_found",
        )
    return model


def prompt_token_ids(prompt: Any, tokenizer: Tokenizer, param: str = "prompt") -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return tokenizer.encode(prompt)
    if isinstance(prompt, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt
    ):
        return list(prompt)
    if prompt is None:
        raise OpenAIError(f"you must provide a {param}", param=param)
    raise OpenAIError(
        f"{param} must be a string or a list of token ids (one per request)", param=param
    )


def chat_messages(messages: Any, param: str = "messages") -> tuple[list[dict[str, str]], int]:
    """The messages' roles and texts, and the tokens their images count."""
    if messages is None:
        raise OpenAIError(f"you must provide {param}", param=param)
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(f"{param} must be a non-empty list", param=param)
    out, num_image_tokens = [], 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise OpenAIError(
                f"{param}[{i}] must be an object with a role", param=f"{param}[{i}]"
            )
        text, tokens = content_text(message.get("content"), f"{param}[{i}].content")
        out.append({"role": message["role"], "content": text})
        num_image_tokens += tokens
    return out, num_image_tokens


def content_text(content: Any, param: str) -> tuple[str, int]:
    """A message's text (a string, or the text parts of a content list) and its images' tokens."""
    if content is None or isinstance(content, str):
        return content or "", 0
    if isinstance(content, list):
        parts, num_image_tokens = [], 0
        for part in content:
            if not isinstance(part, dict):
                raise OpenAIError("a content part must be an object", param=param)
            try:
                tokens = part_image_tokens(part)
            except ValueError as err:
                raise OpenAIError(str(err), param=param) from None
            if tokens is not None:
                num_image_tokens += tokens
            elif part.get("type") in ("text", "input_text") and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise OpenAIError("only text and image content parts are supported", param=param)
        return "".join(parts), num_image_tokens
    raise OpenAIError("content must be a string or a list of content parts", param=param)


def _sampling(body: dict) -> SamplingParams:
    if body.get("stop"):
        raise OpenAIError("stop sequences are not supported; use stop_token_ids", param="stop")
    temperature = _number_field(body, "temperature", 1.0)
    if not 0.0 <= temperature <= MAX_TEMPERATURE:
        raise OpenAIError(
            f"temperature must be in [0, {MAX_TEMPERATURE}], got {temperature}", param="temperature"
        )
    top_p = _number_field(body, "top_p", 1.0)
    if not 0.0 < top_p <= 1.0:
        raise OpenAIError(f"top_p must be in (0, 1], got {top_p}", param="top_p")
    top_k = _int_field(body, "top_k", 0, minimum=-1)  # vLLM spells "no top-k" as -1
    stop_ids = body.get("stop_token_ids") or []
    if not isinstance(stop_ids, list) or not all(isinstance(t, int) for t in stop_ids):
        raise OpenAIError("stop_token_ids must be a list of token ids", param="stop_token_ids")
    seed = _int_field(body, "seed", None, minimum=None)
    low, high = SEED_RANGE
    if seed is not None and not low <= seed <= high:
        raise OpenAIError(f"seed must be in [{low}, {high}], got {seed}", param="seed")
    return SamplingParams(
        temperature=temperature,
        top_k=max(top_k, 0),
        top_p=top_p,
        seed=seed,
        ignore_eos=_bool_field(body, "ignore_eos", False),
        stop_token_ids=tuple(stop_ids),
    )


def _int_field(body: dict, name: str, default: int | None, minimum: int | None = 1) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise OpenAIError(f"{name} must be an integer, got {value!r}", param=name)
    if minimum is not None and value < minimum:
        raise OpenAIError(f"{name} must be >= {minimum}, got {value}", param=name)
    return value


def _number_field(body: dict, name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise OpenAIError(f"{name} must be a number, got {value!r}", param=name)
    return float(value)


def _bool_field(body: dict, name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise OpenAIError(f"{name} must be true or false, got {value!r}", param=name)
    return value
