"""Images sent with each prompt (`scenario.images`): PNG or JPEG files, generated from the seed.

Each request's images are its own (a server that caches image encodings by their hash, as
vLLM does, gets no free hits) and the same on every run of the seed: blocks of
`BLOCK_PX`×`BLOCK_PX` pixels of seeded random colours, so a file is the size of a compressed
photograph's, not of noise: a 512×512 PNG is ~24 KB (13 ms to make on one core), a JPEG ~50 KB
(2 ms). Requests are built as the load runs, so PNGs at a high rate cost the client time.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from llmperf.errors import ConfigError
from llmperf.options import check_choice, check_positive, option

IMAGE_FORMATS = ("png", "jpeg")
BLOCK_PX = 8
MAX_SIDE_PX = 8192


@dataclass
class ImageConfig:
    count: int = option(0, "images per request, sent as content parts (chat, responses, messages); 0: none")
    width_px: int = option(512, "each image's width")
    height_px: int = option(512, "each image's height")
    sizes: list[str] | None = option(None, "a distribution: each image's size drawn uniformly from these WxH (e.g. [256x256, 1024x768]); null: width_px x height_px")
    format: str = option("png", "png or jpeg")

    def __post_init__(self) -> None:
        check_positive(self, "count", allow_none=False, strict=False)
        check_positive(self, "width_px", "height_px", allow_none=False)
        check_choice("format", self.format, IMAGE_FORMATS, "image format")
        for size in self.sizes or ():
            parse_size(size)
        if self.sizes is not None and not self.sizes:
            raise ConfigError("sizes", self.sizes, "name at least one WxH, or null")
        for name in ("width_px", "height_px"):
            if getattr(self, name) > MAX_SIDE_PX:
                raise ConfigError(name, getattr(self, name), f"must be at most {MAX_SIDE_PX}")


def parse_size(size: str) -> tuple[int, int]:
    """"512x384" -> (512, 384)."""
    try:
        width, height = (int(side) for side in str(size).lower().split("x"))
    except ValueError:
        raise ConfigError("sizes", size, "each size is WxH, e.g. 512x512") from None
    if not (0 < width <= MAX_SIDE_PX and 0 < height <= MAX_SIDE_PX):
        raise ConfigError("sizes", size, f"each side must be in [1, {MAX_SIDE_PX}]")
    return width, height


def request_images(config: ImageConfig, seed: int, phase: int, index: int) -> tuple[bytes, ...]:
    """Request `index`'s images (phase 0: measured, 1: warmup): the same for the same arguments."""
    if not config.count:
        return ()
    rng = np.random.default_rng([seed, phase, index])
    sizes = [parse_size(s) for s in config.sizes] if config.sizes else [(config.width_px, config.height_px)]
    out = []
    for _ in range(config.count):
        width, height = sizes[int(rng.integers(len(sizes)))]
        out.append(encode(blocks(width, height, rng), config.format))
    return tuple(out)


def blocks(width_px: int, height_px: int, rng: np.random.Generator) -> np.ndarray:
    """An RGB image (height, width, 3) of seeded random colour blocks."""
    rows, cols = -(-height_px // BLOCK_PX), -(-width_px // BLOCK_PX)
    colours = rng.integers(0, 256, size=(rows, cols, 3), dtype=np.uint8)
    pixels = np.repeat(np.repeat(colours, BLOCK_PX, axis=0), BLOCK_PX, axis=1)
    return np.ascontiguousarray(pixels[:height_px, :width_px])


def encode(pixels: np.ndarray, fmt: str) -> bytes:
    """The image as a PNG or JPEG file (Pillow, which matplotlib already brings)."""
    from PIL import Image

    buffer = io.BytesIO()
    if fmt == "png":  # level 1: a fifth of level 6's time, and these blocks compress alike
        Image.fromarray(pixels, "RGB").save(buffer, format="PNG", compress_level=1)
    else:
        Image.fromarray(pixels, "RGB").save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()
