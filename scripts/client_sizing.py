"""How many client hosts a load needs: the hosts for 1k, 10k and 100k streamed requests a
second, from llmperf's own measured cost per request (docs/sizing.md is this script's table).

    python scripts/client_sizing.py                         # about 4 minutes on 2 cores
    python scripts/client_sizing.py --output-tokens 256 --cores-per-host 32 --rates 1000 50000

1. The client's CPU per streamed request, measured as scripts/client_cost.py measures it
   (the marginal CPU of the whole process tree between a small and a large closed-loop run
   against the repo's mock SSE server), at two output lengths (--fit-tokens, 16 and 256);
   a straight line through them gives the cost at any length: a per-request part (the
   request, its connection's turn, its record) and a per-token part (an SSE event parsed).
2. The coordinator's cost per record: the time to write --records records to requests.jsonl
   as the coordinator does (RecordWriter), the one piece of work it does per request
   whatever the backend.
3. The table: workers = rate x CPU per request / --loop-share (a worker's event loop kept at
   this share of a core, 0.5 by default, under the 0.75 at which client_kept_up calls the
   client CPU-bound); hosts = workers / (cores per host - 1), a core per host left to the OS
   and the network; the coordinator's share of a core for the records.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import client_cost  # noqa: E402  (the measurement of step 1, shared)


def cost_per_request_ms(args, tokens: int, base_url: str, work: Path) -> list[float]:
    """llmperf's marginal CPU per request at `tokens` output tokens, one value a round."""
    args.output_tokens = tokens
    values = []
    for r in range(args.rounds):
        small_s, _ = client_cost.run_client(args, "llmperf", base_url, args.small, work, f"t{tokens}-r{r}")
        large_s, _ = client_cost.run_client(args, "llmperf", base_url, args.large, work, f"t{tokens}-r{r}")
        values.append((large_s - small_s) / (args.large - args.small) * 1e3)
        print(f"  {tokens} tokens, round {r + 1}: {values[-1]:.2f} ms CPU a request", flush=True)
    return values


def coordinator_ms_per_record(records: int, tokens: int, work: Path) -> float:
    """The coordinator's time to write one streamed request's record (RecordWriter)."""
    from llmperf.measure.records import RecordWriter, RequestRecord

    times = [0.001 * k for k in range(tokens)]
    record = RequestRecord(id="r", arrival_s=1.0, dispatch_s=1.0, first_token_s=1.01,
                           end_s=1.5, token_times_s=times, input_tokens=128,
                           output_tokens=tokens, finish_reason="length")
    best = math.inf
    for _ in range(3):
        with RecordWriter(work / "records.jsonl") as writer:
            start = time.process_time()
            for _ in range(records):
                writer.write(record)
            best = min(best, time.process_time() - start)
    return best / records * 1e3


def table(args, per_request_ms: float, record_ms: float) -> str:
    cores = args.cores_per_host - 1
    lines = [f"| streamed req/s | CPU of the clients | workers at {args.loop_share:g} of a core |"
             f" hosts of {args.cores_per_host} cores | coordinator, share of a core |",
             "|---:|---:|---:|---:|---:|"]
    for rate in args.rates:
        cpu_cores = rate * per_request_ms / 1e3
        workers = math.ceil(cpu_cores / args.loop_share)
        hosts = math.ceil(workers / cores)
        coordinator = rate * record_ms / 1e3
        note = " (past one core: the records outrun one coordinator)" if coordinator > 1 else ""
        lines.append(f"| {rate:,} | {cpu_cores:,.1f} cores | {workers:,} | {hosts:,} |"
                     f" {coordinator:.2f}{note} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output-tokens", type=int, default=256, help="the table's output length")
    p.add_argument("--fit-tokens", type=int, nargs=2, default=[16, 256])
    p.add_argument("--rates", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    p.add_argument("--cores-per-host", type=int, default=16)
    p.add_argument("--loop-share", type=float, default=0.5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--small", type=int, default=50)
    p.add_argument("--large", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--gap-s", type=float, default=0.005)
    p.add_argument("--records", type=int, default=20_000)
    args = p.parse_args(argv)
    if args.cores_per_host < 2 or not 0 < args.loop_share <= 1 or args.small >= args.large:
        p.error("--cores-per-host >= 2, 0 < --loop-share <= 1, --small < --large")
    work = Path(tempfile.mkdtemp(prefix="client-sizing-"))
    args.checkpoint = work / "tiny"
    subprocess.run([sys.executable, "-m", "llmperf.export", "model=tiny", f"out={args.checkpoint}",
                    "force=true"], check=True, stdout=subprocess.DEVNULL)
    port = client_cost.free_port()
    server = client_cost.start_mock(port, args.gap_s)
    try:
        fits = {t: statistics.median(cost_per_request_ms(args, t, f"http://127.0.0.1:{port}", work))
                for t in args.fit_tokens}
    finally:
        server.terminate()
        server.wait()
    (t0, c0), (t1, c1) = sorted(fits.items())
    per_token = (c1 - c0) / (t1 - t0)
    per_request = c0 - per_token * t0
    at_length = per_request + per_token * args.output_tokens
    record_ms = coordinator_ms_per_record(args.records, args.output_tokens, work)
    print()
    print(f"llmperf's client: {c0:.2f} ms CPU a request at {t0} tokens, {c1:.2f} at {t1}:"
          f" {per_request:.2f} ms a request + {per_token * 1e3:.1f} us a token;"
          f" {at_length:.2f} ms at {args.output_tokens} tokens. The coordinator:"
          f" {record_ms * 1e3:.0f} us to write a record of {args.output_tokens} tokens.")
    print()
    print(table(args, at_length, record_ms))


if __name__ == "__main__":
    main()
