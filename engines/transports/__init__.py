"""The HTTP clients `engine=openai` can send with, one file each (`engine.transport`).

A transport opens one streamed POST at a time on the caller's event loop and hands back
the response's raw bytes as they arrive; it times its own part of each request (the
connection-pool wait, the last byte written, the response headers) into the request's
`RequestTiming`. What the bytes say is the endpoint's business (engines/openai_stream.py),
so a transport knows nothing of SSE or JSON.
"""

from __future__ import annotations

from llmperf.registry import Registry

TRANSPORTS: Registry[type] = Registry(
    "transport",
    {
        "aiohttp": "engines.transports.aiohttp_transport:AiohttpTransport",
        "httpx": "engines.transports.httpx_transport:HttpxTransport",
    },
)
