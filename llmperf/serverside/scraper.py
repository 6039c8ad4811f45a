"""Scrapes a server's Prometheus /metrics on a thread while the load runs.

Each scrape keeps the samples of the metrics its family maps (llmperf/serverside/families.py),
summed over label sets other than `le` (engines, models), at the midpoint of the HTTP
request on perf_counter()'s clock; `rebase` moves them onto the records' clock.
The first scrape decides whether there is a server-side view at all: a server that is
unreachable, answers an error, or exports no metric of a known family gives the reason
instead, and the run goes on without it.

Beside each scrape the thread times one GET of a cheap endpoint (`probe_url`: /v1/models
on an OpenAI-compatible server): the HTTP round trip through the network, both HTTP stacks
and the server's event loop, with nothing of its engine in it. The latency split uses it
as the measured transport part (llmperf/serverside/decomposition.py). Its rows go into the
CSV as figure `round_trip_s`.
"""

from __future__ import annotations

import csv
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from llmperf.serverside.families import COUNTER, FAMILIES, HISTOGRAM, Family, detect_family

CSV_COLUMNS = ("t_s", "figure", "field", "le", "value", "metric")
ROUND_TRIP = "round_trip_s"  # the figure of the timed probe's rows


@dataclass(frozen=True)
class Row:
    """One value of one figure at one scrape. field: value (counter, gauge) or bucket/sum/count."""

    t_s: float
    figure: str
    field: str
    le: float | None
    value: float
    metric: str


def fetch_text(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (http only)
        return response.read().decode("utf-8", errors="replace")


def parse_rows(text: str, t_s: float, family: Family | None = None) -> tuple[Family | None, list[Row]]:
    """The mapped samples of one /metrics text, and the family they belong to."""
    if family is not None:
        text = _mapped_lines(text, family)
    families = list(text_string_to_metric_families(text))
    if family is None:
        family = detect_family({_base_name(f.name, f.type) for f in families})
        if family is None:
            return None, []
    totals: dict[tuple[str, str, float | None, str], float] = defaultdict(float)
    for metric_family in families:
        metric = _base_name(metric_family.name, metric_family.type)
        figure = family.figure_of(metric)
        if figure is None:
            continue
        for sample in metric_family.samples:
            field = _field(sample.name, metric_family.type)
            if field is None:
                continue
            le = float(sample.labels["le"]) if field == "bucket" else None
            totals[(figure, field, le, metric)] += sample.value
    rows = [Row(t_s, figure, field, le, value, metric) for (figure, field, le, metric), value in totals.items()]
    return family, rows


def _mapped_lines(text: str, family: Family) -> str:
    """Only the lines of the family's mapped metrics: a vLLM /metrics holds thousands of
    lines, and parsing them all on the scraper thread would hold the GIL the load
    generator's clock needs."""
    names = tuple(family.metrics.values())
    kept = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(" ", 3)
            name = parts[2] if len(parts) > 2 else ""
        else:
            name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.startswith(names):
            kept.append(line)
    return "\n".join(kept) + "\n"


def _base_name(name: str, kind: str) -> str:
    """Counters without their `_total` (the parser strips it only when a TYPE line says counter)."""
    return name.removesuffix("_total") if kind in (COUNTER, "unknown") else name


def _field(sample_name: str, kind: str) -> str | None:
    if kind == HISTOGRAM:
        for suffix in ("bucket", "sum", "count"):
            if sample_name.endswith("_" + suffix):
                return suffix
        return None  # _created
    return None if sample_name.endswith("_created") else "value"


class MetricsScraper:
    def __init__(
        self,
        url: str,
        interval_s: float,
        timeout_s: float = 2.0,
        fetch: Callable[[str, float], str] = fetch_text,
        probe_url: str | None = None,
    ) -> None:
        self.url = url
        self.probe_url = probe_url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.fetch = fetch
        self.family: Family | None = None
        self.rows: list[Row] = []
        self.round_trips: list[Row] = []  # figure ROUND_TRIP: one per timed probe
        self.errors: list[str] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.opening_s: float | None = None  # the scrape scrape_now took, on the rows' clock

    def start(self) -> str | None:
        """Scrape once and start the thread; the reason there is no server-side view otherwise."""
        try:
            family, rows = parse_rows(*self._get())
        except (OSError, ValueError) as err:  # unreachable, HTTP error, not Prometheus text
            return f"{self.url}: {_describe(err)}"
        if family is None:
            known = ", ".join(FAMILIES)
            return f"{self.url} exports no metric of a known server family ({known})"
        self.family = family
        self.rows.extend(rows)
        self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)
        self._thread.start()
        return None

    def scrape_soon(self) -> None:
        """Scrape now rather than at the next interval (safe from any thread)."""
        self._wake.set()

    def scrape_now(self) -> None:
        """Scrape on the calling thread and keep it as the measured window's opening scrape
        (`opening_s`): called once the warmup's requests have ended and before the first
        measured one goes out, its counters hold nothing of the measured requests. (A scrape
        only woken then lands while the first requests already generate, and misses their
        first tokens.)"""
        if self._thread is None:
            return
        t_s = self._scrape()
        if t_s is not None:
            self.opening_s = t_s

    def stop(self) -> None:
        """Stop the thread, then scrape once more so the window ends after the last request."""
        if self._thread is None:
            return
        self._stop.set()
        self._wake.set()
        self._thread.join()
        self._thread = None
        self._scrape()

    def rebase(self, origin_perf_counter_s: float) -> None:
        if self.opening_s is not None:
            self.opening_s -= origin_perf_counter_s
        self.rows, self.round_trips = (
            [Row(r.t_s - origin_perf_counter_s, r.figure, r.field, r.le, r.value, r.metric) for r in rows]
            for rows in (self.rows, self.round_trips)
        )

    def write_csv(self, path: Path) -> None:
        with Path(path).open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(CSV_COLUMNS)
            for r in (*self.rows, *self.round_trips):
                writer.writerow(
                    [f"{r.t_s:.6f}", r.figure, r.field, "" if r.le is None else repr(r.le), repr(r.value), r.metric]
                )

    # -- the thread ---------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if not self._stop.is_set():
                self._scrape()
                self._time_round_trip()

    def _scrape(self) -> float | None:
        """One scrape into the rows; its time, or None if it failed."""
        try:
            text, t_s = self._get()
            _, rows = parse_rows(text, t_s, family=self.family)
        except (OSError, ValueError) as err:  # a missed scrape is a gap, not a failed run
            self.errors.append(_describe(err))
            return None
        with self._lock:
            self.rows.extend(rows)
        return t_s

    def _time_round_trip(self) -> None:
        if self.probe_url is None:
            return
        sent_s = time.perf_counter()
        try:
            self.fetch(self.probe_url, self.timeout_s)
        except (OSError, ValueError) as err:  # a missed probe is a gap too
            self.errors.append(f"{self.probe_url}: {_describe(err)}")
            return
        done_s = time.perf_counter()
        with self._lock:
            self.round_trips.append(Row((sent_s + done_s) / 2, ROUND_TRIP, "value", None, done_s - sent_s,
                                        "GET " + self.probe_url))

    def _get(self) -> tuple[str, float]:
        sent_s = time.perf_counter()
        text = self.fetch(self.url, self.timeout_s)
        return text, (sent_s + time.perf_counter()) / 2


def _describe(err: Exception) -> str:
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code}"
    if isinstance(err, urllib.error.URLError):
        return str(err.reason)
    return f"{type(err).__name__}: {err}"


def read_csv(path: Path) -> list[Row]:
    with Path(path).open(encoding="utf-8") as f:
        return [
            Row(float(r["t_s"]), r["figure"], r["field"], float(r["le"]) if r["le"] else None,
                float(r["value"]), r["metric"])
            for r in csv.DictReader(f)
        ]
