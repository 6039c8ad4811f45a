"""Transparent huge pages for the weights and the KV cache (`engine.cpu_huge_pages`).

A CPU decode step streams every weight and every cached K/V position of the batch from
DRAM; in 4 KiB pages that is a TLB miss every page (a two-level walk under a hypervisor).
Where the kernel's transparent huge pages are in `madvise` mode (the common default) no
anonymous memory gets 2 MiB pages unless it asks. `advise_huge` asks (`MADV_HUGEPAGE`),
then `MADV_COLLAPSE` (Linux 6.1+) turns what is already written (the packed weights, in
glibc's heap: their range rounded out to whole huge pages) into huge pages at once rather
than whenever khugepaged passes; the KV cache is advised before it is first written, so its
pages fault in huge. Measured on a 2-core EPYC VM (docs/kernels.md): the decode attention
kernel 11% faster over 30 layers' caches, a decode step 1-5%.
`huge_bytes` reads back from /proc/self/smaps how much sits in huge pages, for info().
`false` advises nothing, but in a process where another engine did, glibc's heap (kept by
`engine.cpu_malloc=tuned`) can hand those advised pages, already huge, to this engine's
allocations; an A/B of the option belongs in two processes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re
from pathlib import Path

import torch
from torch import nn

THP_ROOT = Path("/sys/kernel/mm/transparent_hugepage")
THP_PMD_SIZE = THP_ROOT / "hpage_pmd_size"
MADV_HUGEPAGE = 14  # asm-generic/mman-common.h
MADV_COLLAPSE = 25

Range = tuple[int, int]  # [start, end) addresses


def thp_mode(root: Path = THP_ROOT) -> str | None:
    """The kernel's THP mode for anonymous 2 MiB pages (always, madvise or never); None where
    it has no THP. Kernels with multi-size THP (6.8+) set it per page size
    (`hugepages-2048kB/enabled`), where `inherit` defers to the top-level `enabled`."""
    pmd_kib = huge_page_bytes(root / "hpage_pmd_size") // 1024
    per_size = _bracketed(root / f"hugepages-{pmd_kib}kB" / "enabled")
    if per_size is not None and per_size != "inherit":
        return per_size
    return _bracketed(root / "enabled")


def _bracketed(path: Path) -> str | None:
    """The chosen value of a sysfs choice file ('always [madvise] never' -> 'madvise')."""
    try:
        match = re.search(r"\[(\w+)\]", path.read_text())
    except OSError:
        return None
    return match.group(1) if match else None


@functools.cache
def huge_page_bytes(path: Path = THP_PMD_SIZE) -> int:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 2 << 20


def resolve_huge_pages(choice: str, device_type: str) -> str:
    """`cpu_huge_pages` as used, 'true' or 'false': auto is true on CPU where THP is in
    `madvise` or `always` mode; never on another device (its memory is not the CPU's)."""
    if device_type != "cpu":
        return "false"
    if choice == "auto":
        return "true" if thp_mode() in ("madvise", "always") else "false"
    return choice


def advise_huge(ranges: list[Range], collapse: bool, outward: bool = True) -> None:
    """madvise each range MADV_HUGEPAGE, and with `collapse` MADV_COLLAPSE: rounded out to
    whole huge pages (allocations in a heap, whose neighbours may share their pages), or in
    (a mapping of its own). Best effort: a kernel that refuses leaves the pages as they were."""
    libc = _libc()
    if libc is None:
        return
    size = huge_page_bytes()
    for start, end in merge(ranges, size):
        if outward:
            start, end = start // size * size, -(-end // size) * size
        else:
            start, end = -(-start // size) * size, end // size * size
        if end <= start:
            continue
        libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_HUGEPAGE)
        if collapse:
            libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_COLLAPSE)


def merge(ranges: list[Range], gap: int) -> list[Range]:
    """The ranges sorted, with any two less than `gap` apart joined into one."""
    out: list[list[int]] = []
    for start, end in sorted(ranges):
        if out and start - out[-1][1] < gap:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def weight_ranges(model: nn.Module) -> list[Range]:
    """Where the model's parameters and buffers lie, packed oneDNN weights included."""
    ranges = []
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.device.type != "cpu":
            continue
        if tensor.is_mkldnn:
            start, nbytes = torch.ops.mkldnn.data_ptr(tensor), torch.ops.mkldnn._nbytes(tensor)
        else:
            start, nbytes = tensor.data_ptr(), tensor.numel() * tensor.element_size()
        if nbytes:
            ranges.append((start, start + nbytes))
    return ranges


def tensor_range(tensor: torch.Tensor) -> Range:
    start = tensor.data_ptr()
    return start, start + tensor.numel() * tensor.element_size()


def huge_bytes(ranges: list[Range], smaps: str | None = None) -> int:
    """Bytes of `ranges` that lie in anonymous huge pages, read from /proc/self/smaps: for each
    mapping the ranges overlap, the smaller of its AnonHugePages and the overlap. smaps counts
    a whole mapping, and a mapping can be larger than the ranges: the kernel joins neighbouring
    mappings with the same flags (two advised tensors side by side become one), and an advised
    neighbour can take the edge of an unadvised range. The figure is exact where a mapping is
    all huge or all small pages (what advising a whole range gives), an upper bound otherwise."""
    if smaps is None:
        try:
            smaps = Path("/proc/self/smaps").read_text()
        except OSError:
            return 0
    merged = merge(ranges, 1)
    total, overlap = 0, 0
    for line in smaps.splitlines():
        head = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
        if head:
            lo, hi = int(head.group(1), 16), int(head.group(2), 16)
            overlap = sum(max(0, min(hi, end) - max(lo, start)) for start, end in merged)
        elif overlap and line.startswith("AnonHugePages:"):
            total += min(int(line.split()[1]) * 1024, overlap)
    return total


@functools.cache
def _libc():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise.restype = ctypes.c_int
    return libc


def advise_weights(model: nn.Module) -> None:
    """The model's weights (built and packed: call it last) into huge pages now."""
    advise_huge(weight_ranges(model), collapse=True)


def zeros_in_huge_pages(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zeroed CPU tensor advised before its first write, so its pages fault in huge."""
    tensor = torch.empty(shape, dtype=dtype)
    advise_huge([tensor_range(tensor)], collapse=False, outward=False)
    return tensor.zero_()


def huge_page_report(model: nn.Module, kv_storage: torch.Tensor) -> dict[str, int]:
    """Bytes in huge pages where the weights and the KV cache lie (info()'s `huge_page_bytes`)."""
    return {"weights": huge_bytes(weight_ranges(model)), "kv_cache": huge_bytes([tensor_range(kv_storage)])}
