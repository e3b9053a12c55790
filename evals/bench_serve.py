"""Load benchmark of `ember serve`: N concurrent streaming clients over loopback.

    python evals/bench_serve.py smol.ember [--sessions 4] [--clients 4] [--requests 32]
                                [--max-tokens 64] [--threads 2] [--json]

Starts `ember serve FILE` on a free 127.0.0.1 port, then `--clients` threads each send chat
requests (streamed, greedy, different questions) until `--requests` have been sent in total.
Reports requests/s, aggregate decode tok/s (generated tokens / wall time of the run), p50 and p99
time to first token (request sent -> first text chunk), errors (goal: zero), and the CPU time the
server and the clients spent over the run (on a small machine the clients share its cores with the
server). Not a test: figures depend on the machine; run it on an idle one. Needs the serve extra,
httpx and psutil.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ["What is the capital of France?", "Name three primary colors.", "Explain what a bee does.",
             "Write a sentence about the sea.", "What is 12 times 12?", "Describe a cat.",
             "Why is the sky blue?", "Give me a tip for learning to cook."]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _warm_up(url: str, sessions: int) -> None:
    """One short request per session at once, untimed: the first touches of the mapped weights and
    of each session's arena and cache are not what a running server costs."""
    def one(i: int) -> None:
        body = {"model": "bench", "messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                "max_tokens": 4, "temperature": 0}
        httpx.post(url + "/v1/chat/completions", json=body, timeout=600).raise_for_status()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _server_counters(url: str) -> dict[str, float]:
    """The server's decode counters from GET /metrics: steps, seconds and batch-size sum."""
    values = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("ember_decode_tokens_total", "ember_decode_seconds_total", "ember_decode_batch_mean",
                    "ember_prefill_seconds_total"):
            values[name[len("ember_"):]] = float(value)
    values["decode_batch_sum"] = values.get("decode_batch_mean", 0.0) * values.get("decode_tokens_total", 0.0)
    return values


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def run(args: argparse.Namespace) -> dict:
    port = _free_port()
    cmd = [sys.executable, "-m", "ember", "serve", args.file, "--port", str(port), "--sessions", str(args.sessions),
           "--max-queue", str(max(args.clients, 1)), "--model-name", "bench", "--log-level", "warning"]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    server = subprocess.Popen(cmd, cwd=str(ROOT), env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"ember serve did not start (exit code {server.poll()})")
            time.sleep(0.2)

        _warm_up(url, args.sessions)
        lock = threading.Lock()
        counter = iter(range(args.requests))
        ttfts: list[float] = []
        tokens: list[int] = []
        errors: list[str] = []

        def client() -> None:
            with httpx.Client(timeout=600) as http:
                while True:
                    with lock:
                        i = next(counter, None)
                    if i is None:
                        return
                    body = {"model": "bench", "messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                            "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}}
                    t0 = time.perf_counter()
                    first = None
                    try:
                        with http.stream("POST", url + "/v1/chat/completions", json=body) as r:
                            if r.status_code != 200:
                                raise RuntimeError(f"status {r.status_code}: {r.read()[:200]!r}")
                            for line in r.iter_lines():
                                if not line.startswith("data: {"):
                                    continue
                                chunk = json.loads(line[6:])
                                if first is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                                    first = time.perf_counter() - t0
                                if chunk.get("usage"):
                                    with lock:
                                        tokens.append(chunk["usage"]["completion_tokens"])
                        with lock:
                            ttfts.append(first if first is not None else time.perf_counter() - t0)
                    except Exception as error:  # counted and reported: the goal is zero
                        with lock:
                            errors.append(str(error))

        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        server_cpu, client_cpu = _cpu_seconds(psutil.Process(server.pid)), time.process_time()
        before = _server_counters(url)
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        server_cpu = _cpu_seconds(psutil.Process(server.pid)) - server_cpu
        client_cpu = time.process_time() - client_cpu
        after = _server_counters(url)
        steps = after["decode_tokens_total"] - before["decode_tokens_total"]
        return {
            "file": args.file, "sessions": args.sessions, "clients": args.clients, "requests": args.requests,
            "max_tokens": args.max_tokens, "threads": args.threads, "wall_s": wall,
            "requests_per_s": len(ttfts) / wall, "decode_tokens_per_s": sum(tokens) / wall,
            "ttft_p50_ms": 1e3 * _percentile(ttfts, 0.5), "ttft_p99_ms": 1e3 * _percentile(ttfts, 0.99),
            "server_cpu_s": server_cpu, "client_cpu_s": client_cpu,
            # Per session decode step (a batched step counts once for each of its sessions).
            "decode_batch_mean": (after["decode_batch_sum"] - before["decode_batch_sum"]) / steps if steps else 0.0,
            "decode_step_ms": 1e3 * (after["decode_seconds_total"] - before["decode_seconds_total"]) / steps
            if steps else 0.0,
            "prefill_s": after["prefill_seconds_total"] - before["prefill_seconds_total"],
            "errors": len(errors), "first_errors": errors[:3],
        }
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("file", help="a .ember LLM file")
    p.add_argument("--sessions", type=int, default=4)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['clients']} clients, {result['sessions']} sessions, {len(QUESTIONS)} questions, "
              f"{result['requests']} requests of <= {result['max_tokens']} tokens in {result['wall_s']:.1f} s: "
              f"{result['requests_per_s']:.2f} req/s, {result['decode_tokens_per_s']:.1f} tok/s, "
              f"TTFT p50 {result['ttft_p50_ms']:.0f} ms, p99 {result['ttft_p99_ms']:.0f} ms, "
              f"{result['errors']} errors; CPU s: server {result['server_cpu_s']:.1f}, "
              f"clients {result['client_cpu_s']:.1f}; decode steps: mean batch {result['decode_batch_mean']:.2f}, "
              f"{result['decode_step_ms']:.1f} ms each as a session saw it; prefill {result['prefill_s']:.1f} s")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
