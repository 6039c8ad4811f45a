"""Image content parts, as llmperf-serve takes them: a PNG or JPEG, base64 in a data URI (chat's
`image_url`, the Responses API's `input_image`) or in an Anthropic `image` block.

An image costs one prompt token per 32×32 patch, rounded up in each direction
(`IMAGE_PATCH_PX`): a 512×512 image is 16 × 16 = 256 tokens. The tokens are placeholders
(`IMAGE_TOKEN_ID`) ahead of the text's, so the engine prefills them as it would a vision
encoder's output, and the usage reports them (`image_tokens`).
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from typing import Any

IMAGE_PATCH_PX = 32
IMAGE_TOKEN_ID = 0
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_FRAMES = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def image_tokens(width_px: int, height_px: int) -> int:
    return math.ceil(width_px / IMAGE_PATCH_PX) * math.ceil(height_px / IMAGE_PATCH_PX)


def part_image_tokens(part: dict[str, Any]) -> int | None:
    """The tokens of an image content part; None when the part is not an image. A part that
    is an image this server cannot read raises ValueError."""
    kind = part.get("type")
    if kind == "image_url":
        url = part.get("image_url")
        return _tokens(_from_data_uri(url.get("url") if isinstance(url, dict) else url))
    if kind == "input_image":
        return _tokens(_from_data_uri(part.get("image_url")))
    if kind == "image":
        source = part.get("source") or {}
        if source.get("type") != "base64":
            raise ValueError("an image block's source must be base64 data")
        return _tokens(_b64(source.get("data")))
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's IHDR or a JPEG's frame header; None: neither."""
    if data[:8] == PNG_MAGIC and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker, length = data[i + 1], struct.unpack(">H", data[i + 2:i + 4])[0]
        if marker in JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
        i += 2 + length
    return None


def _tokens(data: bytes) -> int:
    size = image_size(data)
    if size is None or 0 in size:
        raise ValueError("an image must be a PNG or JPEG file")
    return image_tokens(*size)


def _from_data_uri(url: Any) -> bytes:
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
        raise ValueError("an image must be a base64 data URI (this server fetches no URLs)")
    return _b64(url.split(";base64,", 1)[1])


def _b64(text: Any) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise ValueError("an image's base64 data does not decode") from None
