"""The event loop the load generator runs on (`scenario.client.event_loop`).

`uvloop` (libuv under asyncio's API) takes about half asyncio's CPU per socket read and per
callback, which is most of what a streamed request costs the client once its own work is
lean (docs/harness.md, "The client"). `auto` takes it where it is installed (it is a core
dependency on Linux and macOS), else asyncio's own loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from llmperf.registry import Registry

T = TypeVar("T")

EVENT_LOOPS: Registry[Callable[[], asyncio.AbstractEventLoop]] = Registry(
    "event loop",
    {"asyncio": asyncio.new_event_loop, "uvloop": "uvloop:new_event_loop"},
    also_valid=("auto",),
)


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if name != "auto":
        return EVENT_LOOPS.get(name)
    try:
        return EVENT_LOOPS.get("uvloop")
    except ImportError:
        return EVENT_LOOPS.get("asyncio")


def run(main: Coroutine[Any, Any, T], event_loop: str = "auto") -> T:
    """asyncio.run(main), on the named loop."""
    with asyncio.Runner(loop_factory=loop_factory(event_loop)) as runner:
        return runner.run(main)
