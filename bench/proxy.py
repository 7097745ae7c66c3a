"""Benchmark the recording proxy on loopback: added time to first byte, and throughput.

Three processes: the fake upstream (replays the reference samples, tests/fixtures/capture),
`cacheaudit capture proxy` in front of it, and this client. Measured:

- added TTFB: N pairs of streamed requests, one direct and one through the proxy, interleaved so
  drift hits both alike; TTFB = request sent -> first body byte, the upstream sending its first
  event at once. Reported: median and p95 of (proxied - direct) per pair, and both medians.
  Target: median added < 5 ms.
- throughput: C concurrent clients streaming the OpenAI sample (33 events, no pauses) for S
  seconds, direct and through the proxy: completed exchanges per second and MB/s; then every
  proxied exchange is checked to be in the capture.

Client sockets set TCP_NODELAY: without it the client's request body waits ~40 ms on delayed
ACKs, which would swamp what is measured. Writes figures to $BENCH_JSON when set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "capture"
NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
STREAM_BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True}
NO_PAUSE = {"x-fake-first-pause": "0", "x-fake-gap": "0"}


def serve_upstream() -> None:
    """Child process: run the fake upstream on a free loopback port and print the port."""
    import uvicorn

    sys.path.insert(0, str(FIXTURES))
    from fake_upstream import FakeUpstream  # type: ignore[import-not-found]

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(FakeUpstream(), log_level="critical", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def start_upstream() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-upstream"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    port = proc.stdout.readline().strip()
    return proc, f"http://127.0.0.1:{port}"


def start_proxy(upstream: str, out: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "capture", "proxy", "--upstream", upstream,
         "--listen", "127.0.0.1:0", "--out", str(out), "--summary-every", "0"],
        stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        if "listening on http://" in line:
            return proc, line.split("listening on ")[1].split(",")[0]
    raise SystemExit("proxy did not start")


def ttfb_ms(client: httpx.Client, base: str) -> float:
    start = time.perf_counter()
    with client.stream(
        "POST", base + "/v1/chat/completions", json=STREAM_BODY, headers=NO_PAUSE
    ) as response:
        first: float | None = None
        for _ in response.iter_raw():
            first = first or time.perf_counter()
    assert first is not None
    return (first - start) * 1000.0


def measure_ttfb(direct: str, proxied: str, pairs: int) -> dict[str, float]:
    transport = httpx.HTTPTransport(socket_options=NODELAY)
    with httpx.Client(transport=transport, timeout=30) as client:
        for _ in range(20):  # warm both paths' connections
            ttfb_ms(client, direct), ttfb_ms(client, proxied)
        d, p = [], []
        for _ in range(pairs):
            d.append(ttfb_ms(client, direct))
            p.append(ttfb_ms(client, proxied))
    added = sorted(b - a for a, b in zip(d, p, strict=True))
    return {
        "pairs": pairs,
        "added_ttfb_median_ms": round(statistics.median(added), 3),
        "added_ttfb_p95_ms": round(added[int(0.95 * (len(added) - 1))], 3),
        "direct_ttfb_median_ms": round(statistics.median(d), 3),
        "proxied_ttfb_median_ms": round(statistics.median(p), 3),
    }


async def _worker(client: httpx.AsyncClient, url: str, stop: float, tally: list[int]) -> None:
    while time.perf_counter() < stop:
        async with client.stream("POST", url, json=STREAM_BODY, headers=NO_PAUSE) as response:
            size = 0
            async for chunk in response.aiter_raw():
                size += len(chunk)
        tally[0] += 1
        tally[1] += size


async def _throughput(base: str, seconds: float, concurrency: int) -> dict[str, float]:
    transport = httpx.AsyncHTTPTransport(socket_options=NODELAY)
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(transport=transport, limits=limits, timeout=60) as client:
        tally = [0, 0]
        start = time.perf_counter()
        stop = start + seconds
        url = base + "/v1/chat/completions"
        await asyncio.gather(*(_worker(client, url, stop, tally) for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {
        "exchanges": tally[0],
        "exchanges_per_s": round(tally[0] / elapsed, 1),
        "mb_per_s": round(tally[1] / elapsed / 1e6, 2),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300, help="TTFB pairs (direct, proxied)")
    parser.add_argument("--seconds", type=float, default=5.0, help="each throughput run")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_upstream:
        serve_upstream()
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp:
        out = Path(tmp) / "capture"
        upstream_proc, upstream = start_upstream()
        proxy_proc, proxy = start_proxy(upstream, out)
        try:
            ttfb = measure_ttfb(upstream, proxy, args.pairs)
            direct = asyncio.run(_throughput(upstream, args.seconds, args.concurrency))
            proxied = asyncio.run(_throughput(proxy, args.seconds, args.concurrency))
        finally:
            proxy_proc.terminate()
            proxy_proc.wait(timeout=30)
            upstream_proc.terminate()
            upstream_proc.wait(timeout=30)
        recorded = sum(p.read_bytes().count(b"\n") for p in out.glob("*.jsonl"))
    expected = 20 + args.pairs + proxied["exchanges"]
    results: dict[str, Any] = {
        **ttfb,
        "concurrency": args.concurrency,
        "direct_exchanges_per_s": direct["exchanges_per_s"],
        "proxied_exchanges_per_s": proxied["exchanges_per_s"],
        "proxied_mb_per_s": proxied["mb_per_s"],
        "records_written": recorded,
        "records_expected": expected,
        "cores": os.cpu_count(),
    }
    print(
        f"proxy added TTFB: median {ttfb['added_ttfb_median_ms']:.2f} ms,"
        f" p95 {ttfb['added_ttfb_p95_ms']:.2f} ms over {args.pairs} pairs"
        f" (direct median {ttfb['direct_ttfb_median_ms']:.2f} ms,"
        f" proxied {ttfb['proxied_ttfb_median_ms']:.2f} ms); target median < 5 ms"
    )
    print(
        f"throughput, {args.concurrency} concurrent streams of 8.8 kB:"
        f" direct {direct['exchanges_per_s']}/s, through the proxy"
        f" {proxied['exchanges_per_s']}/s ({proxied['mb_per_s']} MB/s)"
    )
    print(f"records: {recorded} written for {expected} proxied exchanges")
    if os.environ.get("BENCH_JSON"):
        Path(os.environ["BENCH_JSON"]).write_text(json.dumps(results, indent=2))
    return 0 if recorded == expected else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
