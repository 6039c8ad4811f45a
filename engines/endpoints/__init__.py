"""The APIs `engine=openai` speaks, one file each (`engine.endpoint`).

An endpoint is what differs between APIs: the path, the request body it builds from a
`Request`, the headers that carry the key, and how its stream's events (or its whole body)
become `StreamState` updates and `TokenEvent`s. The transport (engines/transports/) moves
the bytes and the engine (engines/openai_http.py) times them; neither knows which API it is.
"""

from __future__ import annotations

from llmperf.registry import Registry

ENDPOINTS: Registry[type] = Registry(
    "endpoint",
    {
        "completions": "engines.endpoints.completions:Completions",
        "chat": "engines.endpoints.chat:Chat",
        "embeddings": "engines.endpoints.embeddings:Embeddings",
        "responses": "engines.endpoints.responses:Responses",
        "messages": "engines.endpoints.messages:Messages",
    },
)
# Body keys llmperf itself sets on every endpoint: `engine.extra_body` may not override them
RESERVED_BODY_KEYS = ("model", "stream", "max_tokens", "max_output_tokens", "max_completion_tokens")
