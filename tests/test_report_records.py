import numpy as np
import pytest

from llmperf.measure.catalog import STAT_KEYS
from llmperf.measure.metrics import distribution
from llmperf.report import records as rec


def record(id, arrival, tokens, *, output=None, input=10, error=None, warmup=False,
           dispatch=None, end=None):
    return {"id": id, "arrival_s": arrival, "dispatch_s": arrival if dispatch is None else dispatch,
            "first_token_s": tokens[0] if tokens else None,
            "end_s": end if end is not None else tokens[-1], "token_times_s": tokens,
            "input_tokens": input, "output_tokens": len(tokens) if output is None else output,
            "finish_reason": "error" if error else "length", "error": error, "warmup": warmup}


RECORDS = [
    record("w", -1.0, [-0.5, -0.4], warmup=True),
    record("a", 0.0, [0.5, 0.75, 1.0], input=10, dispatch=0.01),
    record("b", 1.0, [1.2], input=20, dispatch=1.05),
    record("c", 1.5, [], input=5, error="boom", end=2.0),
]


def test_per_request_latencies_follow_the_definitions():
    a, b = RECORDS[1], RECORDS[2]
    assert rec.ttft_s(a) == 0.5 and rec.e2e_s(a) == 1.0
    assert rec.tpot_s(a) == pytest.approx((1.0 - 0.5) / 2)
    assert rec.tpot_s(b) is None  # one output token: no TPOT
    assert rec.itl_s([a, b]) == pytest.approx([0.25, 0.25])


def test_summary_from_records_by_hand():
    s = rec.summary_from_records(RECORDS)
    assert (s["num_requests"], s["num_completed"], s["num_failed"]) == (3, 2, 1)
    assert s["duration_s"] == 2.0  # first measured arrival 0.0 to last end 2.0
    assert s["request_throughput_rps"] == 1.0
    assert s["output_throughput_tps"] == (3 + 1) / 2.0
    assert s["total_throughput_tps"] == (10 + 20 + 3 + 1) / 2.0
    assert s["ttft_s"]["mean"] == pytest.approx(0.35)
    assert s["ttft_s"]["max"] == 0.5
    assert s["tpot_s"]["median"] == pytest.approx(0.25)
    assert s["e2e_s"]["mean"] == pytest.approx(0.6)
    assert s["dispatch_lag_s"]["mean"] == pytest.approx((0.01 + 0.05 + 0.0) / 3)


def test_distribution_matches_numpy_and_handles_empty():
    values = [0.1, 0.2, 0.3, 0.4, 1.0]
    d = distribution(values)
    assert d["p90"] == pytest.approx(np.percentile(values, 90))
    assert d["std"] == pytest.approx(np.std(values))
    assert distribution([]) == dict.fromkeys(STAT_KEYS)


def test_output_rate_counts_every_token_of_chunked_events():
    # An HTTP engine: 3 events carrying 6 tokens, so each event counts 2.
    chunked = record("h", 0.0, [0.1, 0.6, 1.1], output=6)
    starts, rates = rec.output_rate([chunked, RECORDS[1]], width_s=0.5)
    assert list(starts) == [0.0, 0.5, 1.0]
    assert rates.sum() * 0.5 == pytest.approx(6 + 3)
    assert list(rates) == pytest.approx([2 / 0.5, (2 + 2) / 0.5, (2 + 1) / 0.5])


def test_in_flight_steps_up_at_arrival_and_down_at_end():
    times, counts = rec.in_flight(RECORDS[1:])
    assert list(times) == [0.0, 1.0, 1.0, 1.2, 1.5, 2.0]
    assert list(counts) == [1, 0, 1, 0, 1, 0]


@pytest.mark.parametrize(("span_s", "width_s"), [(5.0, 0.1), (10.0, 0.2), (59.0, 1.0),
                                                 (600.0, 10.0), (10_000.0, 300.0)])
def test_bin_width_is_round_and_keeps_at_most_sixty_bins(span_s, width_s):
    assert rec.bin_width_s(span_s) == width_s
    assert span_s / rec.bin_width_s(span_s) <= 60
