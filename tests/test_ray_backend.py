"""scenario.client.backend=ray: the load from Ray actors spread over a cluster's nodes (here
three simulated nodes of ray.cluster_utils.Cluster on one machine), on one clock measured
by ping-pong probes, with lost workers recorded."""

from __future__ import annotations

import io
import json
import os
import pickle
import threading
import time

import pytest
from rich.console import Console

from engines.reference.tokenizer import ByteTokenizer
from llmperf.measure.metrics import compute_metrics
from llmperf.measure.records import RequestRecord
from llmperf.run.runner import run_benchmark
from llmperf.serve.app import build_app
from llmperf.serve.server import ServerThread, build_server
from llmperf.workload.requests import Workload
from tests.test_ray_child import alive

ray = pytest.importorskip("ray")


def test_take_returns_the_messages_pickled_in_the_order_they_were_put():
    from llmperf.measure.backends.ray_actors import LoadWorker, taken

    worker = LoadWorker(in_child=False)
    records = [RequestRecord(id=f"r{k}", arrival_s=k / 10, dispatch_s=k / 10 + 1e-5,
                             first_token_s=None, end_s=k / 10 + 0.002, worker=1)
               for k in range(5)]
    sent = [("ready", 1, None), ("records", 1, records[:3]), ("records", 1, records[3:]),
            ("done", 1, "result")]
    for k, message in enumerate(sent):  # a child's messages come pickled; the actor's own not
        worker.put(pickle.dumps(message) if k % 2 else message)
    got = taken(worker.take(wait_s=0.0, every_s=0.0))
    assert len(got) == 4
    assert [(kind, index) for kind, index, _ in got] == [(k, i) for k, i, _ in sent]
    assert [r.id for _, _, batch in got[1:3] for r in batch] == ["r0", "r1", "r2", "r3", "r4"]
    assert all(r.worker == 1 for _, _, batch in got[1:3] for r in batch)
    assert got[1][2][0].end_s == pytest.approx(0.002) and got[3][2] == "result"
    # nothing posted since: an empty list once wait_s has passed
    started = time.monotonic()
    assert taken(worker.take(wait_s=0.05, every_s=0.0)) == []
    assert time.monotonic() - started >= 0.05


# -- runs on a simulated three-node cluster ----------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        nodes.add_node(num_cpus=1)
    ray.init(address=nodes.address, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    yield nodes
    ray.shutdown()
    nodes.shutdown()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "served.jsonl"
    server = build_server({"model": "syn", "tpot_s": 0.002}, engine_name="synthetic",
                          request_log=log)
    with ServerThread(build_app(server)) as running:
        yield running.base_url, log


def run(tmp_path, *overrides: str):
    from tests.test_run_figures import compose_config

    config = compose_config([
        "scenario.arrival.process=poisson", "scenario.arrival.rate_rps=40",
        "scenario.num_requests=60", "scenario.warmup_requests=3",
        "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=16",
        "scenario.output_tokens.dist=fixed", "scenario.output_tokens.value=4",
        "scenario.client.workers=3", "scenario.client.backend=ray",
        "scenario.validity.min_duration_s=0", "hardware=h100-sxm", "telemetry.enabled=false",
        "report.enabled=false", *overrides,
    ])
    run_benchmark(config, tmp_path, console=Console(file=io.StringIO()))
    summary = json.loads((tmp_path / "summary.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    return summary, records, config


def checks(summary: dict) -> dict[str, dict]:
    return {c["check"]: c for c in summary["validity"]}


def test_three_workers_on_three_nodes_record_each_request_once(cluster, tmp_path):
    summary, records, config = run(tmp_path, "engine=synthetic", "engine.tpot_s=0.002")
    assert summary["valid"], [c for c in summary["validity"] if not c["ok"]]
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)) == 63  # 60 measured + 3 warmup, each once
    expected = {r.id for r in Workload(config.scenario, ByteTokenizer(259)).requests()}
    assert {r["id"] for r in records if not r["warmup"]} == expected
    assert len({r["node"] for r in records}) == 3
    assert {r["worker"]: r["node"] for r in records}.keys() == {0, 1, 2}
    for worker in range(3):  # one node per worker
        assert len({r["node"] for r in records if r["worker"] == worker}) == 1
    # The summary is the one the merged requests.jsonl gives
    again = compute_metrics([RequestRecord.from_dict(r) for r in records], config.scenario.slo)
    for figure in ("num_completed", "output_throughput_tps", "request_throughput_rps"):
        assert summary[figure] == pytest.approx(again[figure])
    for figure in ("ttft_s", "tpot_s", "e2e_s"):
        assert summary[figure]["median"] == pytest.approx(again[figure]["median"])
    environment = json.loads((tmp_path / "environment.json").read_text())
    assert [c["worker"] for c in environment["clocks"]] == [0, 1, 2]
    assert all(len(c["estimates"]) >= 2 for c in environment["clocks"])  # before and after


def test_a_shifted_worker_clock_is_measured_and_corrected_on_the_servers_timeline(
        cluster, served, tmp_path):
    base_url, log = served
    log.write_text("")
    common = ("engine=openai", f"engine.base_url={base_url}", "engine.model=syn",
              "engine.metrics_url=off", "scenario.client.test_clock_offset_s=0.25")
    summary, records, _ = run(tmp_path / "on", *common)
    shifted = summary["clocks"][2]
    assert abs(shifted["offset_s"] - 0.25) <= shifted["uncertainty_s"] + 1e-4
    assert shifted["uncertainty_s"] < 0.001
    assert summary["valid"] and checks(summary)["clocks_agree"]["ok"], [c for c in summary["validity"] if not c["ok"]]
    # The server's own clock (this host's) saw no request before its intended arrival
    served_at = {json.loads(line)["client_request_id"]: json.loads(line)["arrival_unix_s"]
                 for line in log.read_text().splitlines()}
    origin = summary["origin_unix_s"]
    early = [served_at[r["id"]] - (origin + r["arrival_s"]) for r in records if not r["warmup"]]
    assert min(early) > -0.002, min(early)

    log.write_text("")
    summary, records, _ = run(tmp_path / "off", *common, "scenario.client.clock_correction=false")
    check = checks(summary)["clocks_agree"]
    assert not summary["valid"] and not check["ok"]
    assert "clock_correction=false" in check["detail"] and "worker 2" in check["detail"]
    served_at = {json.loads(line)["client_request_id"]: json.loads(line)["arrival_unix_s"]
                 for line in log.read_text().splitlines()}
    lead = sorted(summary["origin_unix_s"] + r["arrival_s"] - served_at[r["id"]]
                  for r in records if r["worker"] == 2 and not r["warmup"])
    # Uncorrected, worker 2 sent ~250 ms early (its first few less: the start reached it only
    # 0.1 s ahead of the coordinator's, so on its clock they were already due)
    assert lead[0] > 0.1 and lead[len(lead) // 2] > 0.2


def test_a_killed_worker_gives_worker_lost_records_for_exactly_its_requests_in_flight(
        cluster, tmp_path):
    # Nearly even gaps (gamma, CV 1%): 3 req/s, one a second per worker, each 1.2 s long, so
    # each worker has one or two in flight; worker 2 is killed 0.3 s after one of its sends.
    overrides = ("engine=synthetic", "engine.tpot_s=0.02", "scenario.output_tokens.value=60",
                 "scenario.arrival.process=gamma", "scenario.arrival.rate_rps=3",
                 "scenario.arrival.burstiness=10000", "scenario.num_requests=18",
                 "scenario.warmup_requests=0")
    from tests.test_run_figures import compose_config

    schedule = list(Workload(compose_config(list(overrides) + ["scenario.client.workers=3"]).scenario,
                             ByteTokenizer(259)).requests())
    worker2 = schedule[2::3]
    victim_send_s = worker2[2].arrival_s  # its third request
    killed_at: list[float] = []
    child: list[int] = []  # the killed actor's child process, running its load

    def kill() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                actor = ray.get_actor(f"llmperf-{os.getpid()}-worker-2")
                break
            except ValueError:
                time.sleep(0.05)
        summary_origin = started.wait(60)
        assert summary_origin
        pid = ray.get(actor.child_pid.remote())
        child.extend([pid, pid is not None and alive(pid)])
        time.sleep(max(0.0, start_s[0] + victim_send_s + 0.3 - time.perf_counter()))
        killed_at.append(time.perf_counter())
        ray.kill(actor, no_restart=True)

    started, start_s = threading.Event(), [0.0]
    import llmperf.measure.backends.ray_pool as ray_pool

    original = ray_pool.RayPool._measure_started

    def note_start(self, start_perf_s: float) -> None:
        original(self, start_perf_s)
        start_s[0] = start_perf_s
        started.set()

    ray_pool.RayPool._measure_started = note_start
    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    try:
        summary, records, _ = run(tmp_path, *overrides)
    finally:
        ray_pool.RayPool._measure_started = original
    killer.join(timeout=5)
    kill_s = killed_at[0] - summary["origin_perf_counter_s"]
    lost = {r["id"] for r in records if r["error"] == "worker lost"}
    # in flight: sent before the kill and not done by then (each takes ~1.2 s)
    expected = {r.id for r in worker2
                if summary["measure_start_s"] + r.arrival_s <= kill_s
                and not any(x["id"] == r.id and x["error"] is None and x["end_s"] <= kill_s
                            for x in records)}
    assert lost == expected and 1 <= len(lost) <= 2
    assert all(r["worker"] == 2 for r in records if r["error"] == "worker lost")
    # the others went on to the end: every request of workers 0 and 1 completed
    assert {r["id"] for r in records if r["worker"] != 2 and r["error"] is None} == {
        r.id for k, r in enumerate(schedule) if k % 3 != 2}
    assert not summary["valid"]
    assert summary["workers_lost"][0]["worker"] == 2
    assert summary["workers_lost"][0]["in_flight"] == len(lost)
    assert "worker 2" in checks(summary)["no_worker_lost"]["detail"]
    # its load went with it: the child was alive when the actor was killed, and is not now
    assert child[1], child
    assert not alive(child[0]), f"the killed actor's child {child[0]} still runs"


@pytest.mark.parametrize("relay", ["stream", "take"])
def test_records_stream_back_in_batches_while_the_load_runs(cluster, monkeypatch, relay):
    from engines.base import Request
    from engines.synthetic_options import SyntheticEngineConfig
    from llmperf.measure.backends import ray_pool, record_stream
    from llmperf.measure.backends.plan import LoadPlan
    from llmperf.measure.worker_process import RECORDS_BATCH, RECORDS_FLUSH_S

    takes: list[tuple[int, list[int]]] = []  # per take (read): the worker, its records' batches
    answers, read = ray_pool._answers, record_stream.RecordStream.read

    def counted(*args):
        got = answers(*args)
        takes.extend((i, [len(m[2]) for m in ms if m[0] == "records"]) for i, ms in got)
        return got

    def counted_read(*args):
        got = read(*args)
        takes.extend((i, [len(m[2]) for m in map(pickle.loads, ms) if m[0] == "records"])
                     for i, ms in got)
        return got

    monkeypatch.setattr(ray_pool, "_answers", counted)
    monkeypatch.setattr(record_stream.RecordStream, "read", counted_read)
    received: list[tuple[float, RequestRecord]] = []  # perf_counter() at receipt, the record
    pool = ray_pool.RayPool(2, SyntheticEngineConfig(tpot_s=0.001), "syn", relay=relay,
                            on_record=lambda r: received.append((time.perf_counter(), r)))
    # 100 req/s for 3 s, each 2 tokens (~1 ms): worker k mod 2 sends request k
    requests = [Request(id=f"r{k}", max_tokens=2, prompt_token_ids=[1] * 8, arrival_s=k / 100)
                for k in range(300)]
    result = pool.run(LoadPlan(warmup=[], requests=requests))
    assert sorted(r.id for _, r in received) == sorted(r.id for r in requests)
    assert not pool.lost
    # Streamed: every record came back well within the run, not at its end (a batch leaves a
    # worker every RECORDS_FLUSH_S, taken every POLL_S), so the first second's records were
    # all in before the last request was sent
    start_s = result.origin_perf_counter_s + result.measure_start_s
    delays = sorted(at - (result.origin_perf_counter_s + r.end_s) for at, r in received)
    assert 0 < delays[0] and delays[-1] < 1.0, (delays[0], delays[-1])
    first_second = [at for at, r in received if r.arrival_s < result.measure_start_s + 1.0]
    assert len(first_second) >= 90  # 100 sent in it (records' times are from the run's origin)
    assert max(first_second) < start_s + requests[-1].arrival_s
    # Streamed: per worker at most one records message per RECORDS_FLUSH_S of its 3 s and
    # one per request (its 150 end 20 ms apart: about one each), none over RECORDS_BATCH;
    # taken, one take per POLL_S (30) holding several of them
    for worker in (0, 1):
        sizes = [size for i, batch in takes if i == worker for size in batch]
        assert sum(sizes) == 150 and max(sizes) <= RECORDS_BATCH
        assert 150 / 3 <= len(sizes) <= min(150, 3.0 / RECORDS_FLUSH_S * 1.5), sizes
        with_records = [batch for i, batch in takes if i == worker and batch]
        if relay == "take":
            assert 3.0 / ray_pool.POLL_S / 3 <= len(with_records) <= 3.0 / ray_pool.POLL_S * 1.5
            assert len(with_records) < len(sizes)


def test_a_sweep_on_the_ray_launcher_runs_one_job_at_a_time_with_a_server_resource(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    import subprocess
    import sys

    sweep = tmp_path / "sweep"
    result = subprocess.run(
        [sys.executable, "-m", "llmperf", "-m", "hydra/launcher=ray",
         "+hydra.launcher.ray.init.address=local",  # its own Ray, not this module's cluster
         "+hydra.launcher.ray.init.resources={llmperf_server:1}",
         "+hydra.launcher.ray.remote.resources={llmperf_server:1}",
         "engine=synthetic", "engine.tpot_s=0.01", "scenario.num_requests=20",
         "scenario.validity.min_duration_s=0", "report.enabled=false", "telemetry.enabled=false",
         "scenario.arrival.rate_rps=20,40,60", f"hydra.sweep.dir={sweep}"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len((sweep / "sweep.csv").read_text().splitlines()) == 4
    windows = []
    for summary_path in sweep.glob("*/summary.json"):
        origin = json.loads(summary_path.read_text())["origin_unix_s"]
        records = [json.loads(line) for line in
                   (summary_path.parent / "requests.jsonl").read_text().splitlines()]
        windows.append((origin + min(r["dispatch_s"] for r in records),
                        origin + max(r["end_s"] for r in records)))
    windows.sort()
    assert len(windows) == 3
    assert all(end <= next_start for (_, end), (next_start, _) in zip(windows, windows[1:], strict=False))


def test_the_backend_option_names_every_load_backend():
    from llmperf.measure.backends import LOAD_BACKENDS, backend_name
    from llmperf.measure.client_options import LOAD_BACKEND_NAMES, ClientConfig

    # `loop` is chosen, not named: one worker on this host runs on the run's own loop
    assert ("loop", *LOAD_BACKEND_NAMES) == LOAD_BACKENDS.names
    with pytest.raises(ValueError, match="processes, ray"):
        ClientConfig(backend="k8s")
    assert backend_name(ClientConfig()) == "loop"
    assert backend_name(ClientConfig(workers=2)) == "processes"
    assert backend_name(ClientConfig(backend="ray")) == "ray"
    with pytest.raises(ValueError, match="only the ray backend"):
        ClientConfig(test_clock_offset_s=0.25)
