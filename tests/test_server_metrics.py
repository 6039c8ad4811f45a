"""The server-side view's arithmetic: histogram deltas and bucket quantiles against hand-computed
values, parsing vLLM's /metrics text, the window's figures, the latency split and its checks."""

from __future__ import annotations

import math
import time

import pytest

from llmperf.measure.validity import prefix_cache_unexpected, server_agrees, split_closes
from llmperf.run.config import ValidityConfig
from llmperf.serverside.decomposition import decompose
from llmperf.serverside.families import FAMILIES, detect_family
from llmperf.serverside.histogram import Histogram
from llmperf.serverside.scraper import ROUND_TRIP, MetricsScraper, Row, parse_rows, read_csv
from llmperf.serverside.window import round_trip_summary, window_summary
from llmperf.workload.requests import longest_shared_prefix

# -- histograms ---------------------------------------------------------------------------


def test_bucket_quantile_interpolates_inside_the_bucket_like_histogram_quantile():
    # 10 observations: 2 in (0, 0.1], 4 in (0.1, 0.5], 2 in (0.5, 1], 2 above 1.
    h = Histogram.from_buckets([(0.1, 2), (0.5, 6), (1.0, 8), (math.inf, 10)], 6.0, 10)
    assert h.quantile(0.1) == pytest.approx(0.05)  # rank 1 of 2 in [0, 0.1]
    assert h.quantile(0.5) == pytest.approx(0.1 + 0.4 * 3 / 4)  # rank 5: 3rd of 4 in (0.1, 0.5]
    assert h.quantile(0.7) == pytest.approx(0.5 + 0.5 * 1 / 2)  # rank 7: 1st of 2 in (0.5, 1]
    assert h.quantile(0.95) == 1.0  # in +Inf: the highest finite bound
    assert h.mean == pytest.approx(0.6)


def test_histogram_delta_keeps_only_the_observations_in_between():
    before = Histogram.from_buckets([(0.1, 1), (1.0, 3), (math.inf, 3)], 1.2, 3)
    after = Histogram.from_buckets([(0.1, 1), (1.0, 7), (math.inf, 8)], 5.7, 8)
    window = after.minus(before)
    assert window.cumulative == (0, 4, 5) and window.count == 5
    assert window.mean == pytest.approx(4.5 / 5)
    assert window.quantile(0.5) == pytest.approx(0.1 + 0.9 * 2.5 / 4)


def test_a_restarted_server_counts_from_its_restart():
    before = Histogram.from_buckets([(1.0, 5)], 2.0, 5)
    after = Histogram.from_buckets([(1.0, 2)], 0.5, 2)
    assert after.minus(before) == after


def test_an_empty_window_has_no_quantile_or_mean():
    h = Histogram.from_buckets([(1.0, 4)], 2.0, 4)
    empty = h.minus(h)
    assert empty.quantile(0.5) is None and empty.mean is None


# -- parsing ------------------------------------------------------------------------------

VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} %(gen)s
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} %(queries)s
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} %(hits)s
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} %(t1)s
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} %(t2)s
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} %(t2)s
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} %(t2)s
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} %(tsum)s
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} %(t2)s
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} %(t2)s
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} %(qsum)s
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} %(t2)s
vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} %(t2)s
vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} %(psum)s
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.0
"""


def vllm_text(**values) -> str:
    defaults = dict(gen=100, queries=0, hits=0, t1=1, t2=2, tsum=0.3, qsum=0.1, psum=0.18)
    return VLLM_TEXT % {**defaults, **values}


def test_vllm_text_is_recognised_and_reduced_to_the_mapped_figures():
    family, rows = parse_rows(vllm_text(), t_s=5.0)
    assert family is FAMILIES["vllm"]
    by_key = {(r.figure, r.field, r.le): r.value for r in rows}
    assert by_key[("output_tokens", "value", None)] == 100  # the counter, not its _created
    assert by_key[("running", "value", None)] == 3.0
    assert by_key[("ttft_s", "bucket", 0.1)] == 1 and by_key[("ttft_s", "bucket", math.inf)] == 2
    assert by_key[("ttft_s", "sum", None)] == 0.3
    assert all(r.t_s == 5.0 for r in rows)
    assert not any(r.metric.startswith("process_") for r in rows)


def test_label_sets_are_summed_so_two_engines_count_as_one_server():
    text = vllm_text().replace('engine="0"', 'engine="1"')
    _, rows = parse_rows(vllm_text() + "\n".join(line for line in text.splitlines() if "generation_tokens_total{" in line) + "\n",
                         t_s=0.0)
    assert {(r.figure, r.field): r.value for r in rows}[("output_tokens", "value")] == 200


def test_each_family_is_detected_by_its_own_names():
    for name, family in FAMILIES.items():
        assert detect_family(set(family.metrics.values())) is family, name
    assert detect_family({"http_requests_total", "process_cpu_seconds"}) is None


# -- the window ---------------------------------------------------------------------------


def rows_at(*scrapes):
    out = []
    for t_s, values in scrapes:
        out += parse_rows(vllm_text(**values), t_s=t_s)[1]
    return out


def test_window_figures_are_the_differences_between_its_first_and_last_scrapes():
    rows = rows_at(
        (-0.5, dict(gen=10, t1=1, t2=2, tsum=0.3, qsum=0.1, psum=0.18)),  # during warmup
        (1.0, dict(gen=40, queries=100, hits=0, t1=1, t2=2, tsum=0.3, qsum=0.1, psum=0.18)),  # at start
        (3.0, dict(gen=200, queries=612, hits=128, t1=3, t2=6, tsum=1.1, qsum=0.3, psum=0.62)),  # after the end
    )
    s = window_summary(rows, start_s=0.9, end_s=2.8)
    assert s["server_view"] == "complete"
    assert (s["server_window_start_s"], s["server_window_end_s"]) == (1.0, 3.0)
    assert s["server_output_tokens"] == 160
    assert s["server_prefix_cache_hit_rate"] == pytest.approx(128 / 512)
    assert s["server_ttft_s"]["count"] == 4
    assert s["server_ttft_s"]["mean"] == pytest.approx(0.8 / 4)
    # 2 of 4 in [0, 0.1], 2 in (0.1, 0.5]: the median is the 0.1 bound; p90 is 0.1 + 0.4 * 1.6/2.
    assert s["server_ttft_s"]["median"] == pytest.approx(0.1)
    assert s["server_ttft_s"]["p90"] == pytest.approx(0.1 + 0.4 * 1.6 / 2)
    assert s["server_queue_s"]["mean"] == pytest.approx(0.2 / 4)
    assert s["server_prefill_s"]["mean"] == pytest.approx(0.44 / 4)
    assert s["server_running_max"] == 3.0 and s["server_kv_cache_usage_mean"] == 0.25  # scrapes inside only
    assert "interpolated" in s["server_percentiles"]


def test_a_server_that_stopped_answering_leaves_an_incomplete_view():
    rows = rows_at((1.0, {}), (2.0, {}))
    s = window_summary(rows, start_s=0.9, end_s=5.0)
    assert s == {"server_view": s["server_view"]} and s["server_view"].startswith("incomplete")


# -- the split ----------------------------------------------------------------------------


def test_client_latency_splits_into_queue_prefill_decode_and_overhead():
    summary = {
        "ttft_s": {"mean": 0.200, "median": 0.180, "p90": 0.300, "p99": 0.400},
        "e2e_s": {"mean": 2.000, "median": 1.900, "p90": 2.500, "p99": 3.000},
        "server_queue_s": {"mean": 0.050},
        "server_prefill_s": {"mean": 0.140},
        "server_decode_s": {"mean": 1.780},
        "server_ttft_s": {"mean": 0.192, "median": 0.170, "p90": 0.290, "p99": 0.410},
        "server_e2e_s": {"mean": 1.975, "median": 1.880, "p90": None, "p99": 2.900},
    }
    split = decompose(summary)
    assert split["ttft_overhead_s"]["mean"] == pytest.approx(0.010)
    assert split["ttft_overhead_pct"] == pytest.approx(5.0)
    assert split["ttft_overhead_s"]["median"] == pytest.approx(0.010)
    assert split["ttft_overhead_s"]["p99"] == pytest.approx(-0.010)
    assert split["ttft_server_parts"] == "queue_s+prefill_s"
    # The overhead splits into the server's frontend (its TTFT beyond queue + prefill)
    # and the client and network (client TTFT beyond the server's).
    assert split["ttft_frontend_s"] == pytest.approx(0.002)
    assert split["ttft_network_s"] == pytest.approx(0.008)
    assert split["e2e_overhead_s"]["mean"] == pytest.approx(0.030)
    assert "p90" not in split["e2e_overhead_s"]  # the server's p90 is unknown
    # SGLang: a queue time but no prefill time, so its TTFT is the server's whole share.
    sglang = decompose({k: v for k, v in summary.items() if k not in ("server_prefill_s", "server_decode_s")})
    assert sglang["ttft_server_parts"] == "ttft_s" and sglang["ttft_overhead_s"]["mean"] == pytest.approx(0.008)
    assert "ttft_frontend_s" not in sglang
    assert decompose({"ttft_s": summary["ttft_s"]}) == {}


VLLM_LIKE = {  # vLLM at 0.58 req/s on 2 cores, in round figures: a frontend of 15% of TTFT
    "ttft_s": {"mean": 0.800},
    "e2e_s": {"mean": 7.000},
    "server_queue_s": {"mean": 0.030},
    "server_prefill_s": {"mean": 0.650},
    "server_decode_s": {"mean": 6.100},
    "server_ttft_s": {"mean": 0.790},
    "server_e2e_s": {"mean": 6.990},
    "dispatch_lag_s": {"mean": 0.0005},
    "client_send_s": {"mean": 0.0015},  # holds the dispatch lag
    # one probe of several caught in a stall of the client: the mean moves, the median not
    "server_round_trip_s": {"mean": 0.0090, "median": 0.0050},
}


def test_the_transport_timed_on_its_own_closes_the_split():
    split = decompose(VLLM_LIKE)
    # transport = client send (mean) + HTTP round trip (median); unexplained = client - every other part
    assert split["ttft_transport_s"] == pytest.approx(0.0015 + 0.0050)
    assert split["ttft_frontend_s"] == pytest.approx(0.110)
    assert split["ttft_unexplained_s"] == pytest.approx(0.800 - 0.030 - 0.650 - 0.110 - 0.0065)
    assert split["ttft_unexplained_pct"] == pytest.approx(100 * 0.0035 / 0.800)
    assert split["e2e_unexplained_s"] == pytest.approx(7.000 - 0.030 - 0.650 - 6.100 - 0.210 - 0.0065)
    # Without a whole TTFT (SGLang-like) the frontend has no figure: it stays unexplained.
    no_whole = decompose({k: v for k, v in VLLM_LIKE.items() if k not in ("server_ttft_s", "server_e2e_s")})
    assert "ttft_frontend_s" not in no_whole
    assert no_whole["ttft_unexplained_s"] == pytest.approx(0.800 - 0.680 - 0.0065)
    # Results without client_send_s (an older run) take the dispatch lag for the client's part.
    older = decompose({k: v for k, v in VLLM_LIKE.items() if k != "client_send_s"})
    assert older["ttft_transport_s"] == pytest.approx(0.0005 + 0.0050)
    # No round trip timed: no transport, no unexplained rest.
    untimed = decompose({k: v for k, v in VLLM_LIKE.items() if k != "server_round_trip_s"})
    assert "ttft_transport_s" not in untimed and "ttft_unexplained_pct" not in untimed


@pytest.mark.parametrize(("client_s", "ok"), [(0.800, True), (0.835, True), (0.900, False), (0.755, False)])
def test_a_split_that_does_not_close_within_5_percent_is_a_warning(client_s, ok):
    summary = {**VLLM_LIKE, "ttft_s": {"mean": client_s}}
    summary.update(decompose(summary))
    check = split_closes(summary, ValidityConfig())
    assert check.ok is ok and check.blocking is False
    assert "transport 6.5 ms (client send 1.5 ms + HTTP round trip median 5.0 ms)" in check.detail
    untimed = {k: v for k, v in VLLM_LIKE.items() if k != "server_round_trip_s"}
    untimed.update(decompose(untimed))
    assert split_closes(untimed, ValidityConfig()).detail.startswith("not measured")


def test_server_agreement_compares_the_client_with_the_servers_own_ttft_where_it_has_one():
    """vLLM's frontend (here 14% of TTFT) is the server's own time; what lies between the
    two accounts is the client and the network (1.25%)."""
    summary = {**VLLM_LIKE, **decompose(VLLM_LIKE)}
    assert summary["ttft_overhead_pct"] == pytest.approx(15.0)
    check = server_agrees(summary, ValidityConfig())
    assert check.ok, check.detail
    assert "server frontend 110.0 ms and client/network 10.0 ms (1.3% of the client's TTFT" in check.detail
    late = {**VLLM_LIKE, "server_ttft_s": {"mean": 0.810}}  # the server saw more than the client: clocks disagree
    assert not server_agrees({**late, **decompose(late)}, ValidityConfig()).ok


@pytest.mark.parametrize(("overhead_s", "ok"), [(0.010, True), (0.030, False), (-0.001, False)])
def test_overhead_outside_0_to_10_percent_of_ttft_is_a_warning(overhead_s, ok):
    summary = {"ttft_s": {"mean": 0.2}, "ttft_overhead_s": {"mean": overhead_s}, "ttft_server_parts": "queue_s+prefill_s"}
    check = server_agrees(summary, ValidityConfig())
    assert check.ok is ok and check.blocking is False


def test_prefix_cache_hits_on_prompts_that_share_nothing_are_flagged():
    base = {"server_prefix_cache_hit_rate": 0.09}
    flagged = prefix_cache_unexpected({**base, "server_prefix_cache_hits_tokens": 256, "workload_shared_prefix_tokens": 3},
                                      ValidityConfig())
    assert not flagged.ok and "before this run" in flagged.detail
    shared = {**base, "server_prefix_cache_hits_tokens": 256, "workload_shared_prefix_tokens": 512}
    assert prefix_cache_unexpected(shared, ValidityConfig()).ok
    assert prefix_cache_unexpected({"server_prefix_cache_hits_tokens": 0, "workload_shared_prefix_tokens": 0},
                                   ValidityConfig()).ok


def test_longest_shared_prefix_of_prompts():
    assert longest_shared_prefix([[1, 2, 3, 4], [9, 9], [1, 2, 3, 7], [1, 2]]) == 3
    assert longest_shared_prefix([[5, 6]]) == 0


# -- the scraper --------------------------------------------------------------------------


def test_unreachable_or_foreign_metrics_give_the_reason_and_no_thread():
    dead = MetricsScraper("http://127.0.0.1:1/metrics", 1.0, timeout_s=0.5)
    assert "127.0.0.1:1/metrics" in dead.start()
    foreign = MetricsScraper("x", 1.0, fetch=lambda url, timeout_s: "http_requests_total 3\n")
    assert "no metric of a known server family" in foreign.start()
    assert dead._thread is None and foreign._thread is None


def test_scrape_soon_scrapes_before_the_interval_and_stop_takes_a_last_one(tmp_path):
    served = iter(vllm_text(gen=g) for g in range(100, 10_000, 10))
    scraper = MetricsScraper("x", interval_s=60.0, fetch=lambda url, timeout_s: next(served))
    assert scraper.start() is None
    scraper.scrape_soon()
    deadline = time.monotonic() + 5
    while len({r.t_s for r in scraper.rows}) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    scraper.stop()
    times = sorted({r.t_s for r in scraper.rows})
    assert len(times) == 3
    scraper.rebase(times[0])
    scraper.write_csv(tmp_path / "server_metrics.csv")
    rows = read_csv(tmp_path / "server_metrics.csv")
    tokens = [r.value for r in rows if r.figure == "output_tokens"]
    assert tokens == [100, 110, 120] and rows[0].t_s == 0.0


def test_round_trips_inside_the_window_only():
    trips = [Row(t, ROUND_TRIP, "value", None, v, "GET x/v1/models")
             for t, v in [(0.5, 0.100), (1.0, 0.002), (2.0, 0.004), (3.0, 0.006), (4.0, 0.008), (9.0, 0.100)]]
    s = round_trip_summary(trips, start_s=1.0, end_s=4.0)["server_round_trip_s"]
    assert s["count"] == 4 and s["mean"] == pytest.approx(0.005) and s["median"] == pytest.approx(0.005)
    assert s["p99"] == pytest.approx(0.002 + 0.99 * 3 * 0.002)  # linear between the 4 probes
    assert round_trip_summary(trips, start_s=5.0, end_s=6.0) == {}


def test_the_probe_is_timed_beside_each_scrape_and_kept_out_of_the_scrapes(tmp_path):
    served = iter(vllm_text(gen=g) for g in range(100, 10_000, 10))
    probed = []

    def fetch(url, timeout_s):
        if url == "x/v1/models":
            probed.append(url)
            time.sleep(0.02)
            return "{}"
        return next(served)

    scraper = MetricsScraper("x/metrics", interval_s=60.0, fetch=fetch, probe_url="x/v1/models")
    assert scraper.start() is None
    scraper.scrape_soon()
    deadline = time.monotonic() + 5
    while not scraper.round_trips:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    scraper.stop()
    assert len(probed) == len(scraper.round_trips) == 1
    assert 0.02 <= scraper.round_trips[0].value < 1.0
    assert all(r.figure != ROUND_TRIP for r in scraper.rows)
    scraper.write_csv(tmp_path / "server_metrics.csv")
    rows = read_csv(tmp_path / "server_metrics.csv")
    trips = [r for r in rows if r.figure == ROUND_TRIP]
    assert len(trips) == 1 and trips[0].metric == "GET x/v1/models"
    # The CSV's round trips do not disturb the window's figures.
    assert window_summary(rows, 0.0, 1e12) == window_summary(scraper.rows, 0.0, 1e12)


def test_the_opening_scrape_is_taken_on_the_callers_thread_and_opens_the_window():
    """scrape_now, between the warmup and the first measured request, opens the window even
    though it comes before the measured phase's start: the tokens the measured requests
    generate before the next periodic scrape are counted (a scrape only woken then missed
    17 of 768 on a CI machine)."""
    served = iter(vllm_text(gen=g) for g in (100, 130, 200, 260))
    scraper = MetricsScraper("x", interval_s=60.0, fetch=lambda url, timeout_s: next(served))
    assert scraper.start() is None  # gen 100: before the warmup
    scraper.scrape_now()  # gen 130: the warmup's 30 tokens are in it
    opening = scraper.opening_s
    assert opening is not None and len({r.t_s for r in scraper.rows}) == 2
    start = time.perf_counter()  # the measured phase starts after the opening scrape
    time.sleep(0.01)
    scraper.scrape_soon()  # gen 200: a periodic scrape, the measured requests well under way
    deadline = time.monotonic() + 5
    while len({r.t_s for r in scraper.rows}) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    scraper.stop()  # gen 260: the last
    scraper.rebase(start)
    assert scraper.opening_s == pytest.approx(opening - start) and scraper.opening_s < 0
    s = window_summary(scraper.rows, 0.0, 0.005, scraper.opening_s)
    assert s["server_output_tokens"] == 260 - 130
    assert window_summary(scraper.rows, 0.0, 0.005)["server_output_tokens"] == 260 - 200  # without it
