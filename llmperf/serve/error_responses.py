"""Errors as the app answers them: OpenAI's error shape with its status, for the client's
mistakes (`OpenAIError`), unknown routes and the server's own faults."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response

from llmperf.serve.protocol import OpenAIError


def error_response(err: OpenAIError) -> JSONResponse:
    return JSONResponse(err.to_dict(), status_code=err.status)


async def openai_error_response(http: HTTPRequest, err: Exception) -> Response:
    return error_response(err)


async def http_error_response(http: HTTPRequest, err: Exception) -> Response:
    assert isinstance(err, HTTPException)
    code = "not_found" if err.status_code == 404 else None
    return error_response(
        OpenAIError(f"{http.method} {http.url.path}: {err.detail}", err.status_code, code=code)
    )


def internal_error(err: Exception) -> OpenAIError:
    """An unexpected fault, as a 500 in OpenAI's error shape."""
    message = f"internal error: {type(err).__name__}: {err}"
    return OpenAIError(message, status=500, type="server_error")


async def server_error_response(http: HTTPRequest, err: Exception) -> Response:
    return error_response(internal_error(err))
