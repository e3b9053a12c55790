"""Load benchmark of `ember serve`: N concurrent streaming clients over loopback.

    python evals/bench_serve.py smol.ember [--sessions 4] [--clients 4 | 1,4] [--rounds 1]
                                [--requests 32] [--max-tokens 64] [--threads 2] [--in-process] [--json]

Starts `ember serve FILE` on a free 127.0.0.1 port, then `--clients` clients each send chat
requests (streamed, greedy, different questions) until `--requests` have been sent in total. The
clients share one asyncio loop and keep their connections alive (evals/sse_client.py): a load
generator light enough not to take the cores it measures.
With several client counts (`--clients 1,4 --rounds 3`), one server runs them in turn round by
round (interleaved, so that the machine's slow spells hit them alike) and the summary gives each
count's tok/s as a ratio to the first count's, per round and the median, and the rounds grouped by how far
apart the CPUs were through them (machine_state.distance).
`--in-process` drives the same requests through the sessions of one `ember.load` in this process
instead (a thread per client, each on its own session, streaming the text pieces; no HTTP, no server):
the engine's share of a ratio, apart from the serving layer's.
Reports requests/s, aggregate decode tok/s (generated tokens / wall time of the run), p50 and p99
time to first token (request sent -> first text chunk), errors (goal: zero), and the CPU time the
server and the clients spent over the run (on a small machine the clients share its cores with the
server), and the machine's state (machine_state.py): a 90 MiB read before each run and a cache line's
round trip between two CPUs before and after it (a shared VM's slow phases, and its vCPUs moving
apart, move the ratios). Not a test: figures depend on the machine; run it on an idle one. Needs the
serve extra, httpx, psutil and numpy.
"""

from __future__ import annotations

import argparse
import asyncio
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import psutil
from machine_state import FAR_NS, NEAR_NS, PROBE_MIB, describe_trip, distance, read_gbs, trip_ns
from sse_client import SSEConnection

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
    """The server's counters from GET /metrics: decode steps, seconds and batch-size sum; prefill
    tokens and seconds."""
    values = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("ember_decode_tokens_total", "ember_decode_seconds_total", "ember_decode_batch_mean",
                    "ember_prefill_seconds_total", "ember_prefill_tokens_total"):
            values[name[len("ember_"):]] = float(value)
    values["decode_batch_sum"] = values.get("decode_batch_mean", 0.0) * values.get("decode_tokens_total", 0.0)
    return values


def _cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds of the process's threads: the sum of each thread's schedstat (nanoseconds) where
    Linux has it, else psutil's user + system time (in 10 ms ticks: a short run could read 0)."""
    try:
        tasks = list(Path(f"/proc/{process.pid}/task").iterdir())
    except OSError:
        times = process.cpu_times()
        return times.user + times.system
    total = 0
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return total / 1e9


def _start_server(args: argparse.Namespace, max_clients: int) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "ember", "serve", args.file, "--port", str(port), "--sessions", str(args.sessions),
           "--max-queue", str(max(max_clients, 1)), "--model-name", "bench", "--log-level", "warning"]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    server = subprocess.Popen(cmd, cwd=str(ROOT), env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return server, url
        except httpx.HTTPError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            _stop_server(server)
            raise SystemExit(f"ember serve did not start (exit code {server.poll()})")
        time.sleep(0.2)


def _stop_server(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()


def _figures(args: argparse.Namespace, clients: int, wall: float, ttfts: list[float], tokens: int,
             errors: list[str], probe: float, trips: tuple[float | None, float | None]) -> dict:
    """What every run reports, served or in-process."""
    return {
        "file": args.file, "sessions": args.sessions, "clients": clients, "requests": args.requests,
        "max_tokens": args.max_tokens, "threads": args.threads, "wall_s": wall,
        "requests_per_s": len(ttfts) / wall, "decode_tokens_per_s": tokens / wall,
        "ttft_p50_ms": 1e3 * _percentile(ttfts, 0.5), "ttft_p99_ms": 1e3 * _percentile(ttfts, 0.99),
        "errors": len(errors), "first_errors": errors[:3], "read_gbs": probe,
        "core_trip_ns": {"start": trips[0], "end": trips[1]},
    }


def _drive(url: str, server: subprocess.Popen, clients: int, args: argparse.Namespace) -> dict:
    """`clients` concurrent clients (one asyncio loop, one keep-alive connection each) send
    `args.requests` streamed chat requests in all; the run's figures."""
    counter = iter(range(args.requests))
    ttfts: list[float] = []
    tokens: list[int] = []
    errors: list[str] = []
    host, port = url.rsplit("//", 1)[1].split(":")

    async def client() -> None:
        connection = SSEConnection(host, int(port))
        try:
            for i in counter:
                body = {"model": "bench", "messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                        "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
                        "stream_options": {"include_usage": True}}
                t0 = time.perf_counter()
                first: list[float] = []

                def on_event(chunk: dict) -> None:
                    if not first and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                        first.append(time.perf_counter() - t0)
                    if chunk.get("usage"):
                        tokens.append(chunk["usage"]["completion_tokens"])

                try:
                    await connection.post_stream("/v1/chat/completions", body, on_event)
                    ttfts.append(first[0] if first else time.perf_counter() - t0)
                except Exception as error:  # counted and reported: the goal is zero
                    errors.append(str(error))
        finally:
            await connection.close()

    async def all_clients() -> None:
        await asyncio.gather(*(client() for _ in range(clients)))

    probe = read_gbs(args.threads or 2)  # the machine's state for this run (machine_state.py)
    trip_start = trip_ns()
    server_cpu, client_cpu = _cpu_seconds(psutil.Process(server.pid)), time.process_time()
    before = _server_counters(url)
    start = time.perf_counter()
    asyncio.run(all_clients())
    wall = time.perf_counter() - start
    server_cpu = _cpu_seconds(psutil.Process(server.pid)) - server_cpu
    client_cpu = time.process_time() - client_cpu
    trips = (trip_start, trip_ns())
    after = _server_counters(url)
    steps = after["decode_tokens_total"] - before["decode_tokens_total"]
    return {
        **_figures(args, clients, wall, ttfts, sum(tokens), errors, probe, trips),
        "server_cpu_s": server_cpu, "client_cpu_s": client_cpu,
        # Per session decode step (a batched step counts once for each of its sessions).
        "decode_batch_mean": (after["decode_batch_sum"] - before["decode_batch_sum"]) / steps if steps else 0.0,
        "decode_step_ms": 1e3 * (after["decode_seconds_total"] - before["decode_seconds_total"]) / steps
        if steps else 0.0,
        # Summed over requests (each request's time to its first token: overlaps others' decoding).
        "prefill_s": after["prefill_seconds_total"] - before["prefill_seconds_total"],
        # Prompt tokens computed (a prefix a session already held is not).
        "prefill_tokens": int(after["prefill_tokens_total"] - before["prefill_tokens_total"]),
    }


def _drive_in_process(sessions: list, clients: int, args: argparse.Namespace) -> dict:
    """`clients` threads, each on its own session of one loaded model, send `args.requests` chat
    requests in all (streamed, greedy): the run's figures, as _drive's without the server."""
    counter = iter(range(args.requests))
    lock = threading.Lock()
    ttfts: list[float] = []
    stats: list = []
    errors: list[str] = []

    def client(session) -> None:
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            try:
                ids = session.encode_chat([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}])
                t0 = time.perf_counter()
                first = None
                for piece in session.generate(ids, stream=True, max_new_tokens=args.max_tokens, temperature=0):
                    if first is None and piece:
                        first = time.perf_counter() - t0
                with lock:
                    ttfts.append(first if first is not None else time.perf_counter() - t0)
                    stats.append(session.stats)
            except Exception as error:  # counted and reported, as the server's clients do
                with lock:
                    errors.append(str(error))

    probe = read_gbs(args.threads or 2)
    trip_start = trip_ns()
    cpu = time.process_time()
    threads = [threading.Thread(target=client, args=(sessions[j],)) for j in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    trips = (trip_start, trip_ns())
    tokens = sum(st.generated_tokens for st in stats)
    steps = sum(st.decode_steps for st in stats)
    return {
        **_figures(args, clients, wall, ttfts, tokens, errors, probe, trips), "in_process": True,
        "process_cpu_s": cpu,  # one process: the engine and its Python threads
        "decode_batch_mean": sum(st.decode_batch_mean * st.decode_steps for st in stats) / steps if steps else 0.0,
        "decode_step_ms": sum(st.decode_ms for st in stats) / steps if steps else 0.0,
        "prefill_s": sum(st.prefill_ms for st in stats) / 1e3,
        "prefill_tokens": sum(st.prefill_tokens for st in stats),
    }


def _run_in_process(args: argparse.Namespace) -> list[dict]:
    import ember

    llm = ember.load(args.file, threads=args.threads)
    sessions = [llm] + [llm.session() for _ in range(args.sessions - 1)]
    for j, session in enumerate(sessions):  # the warm-up request of each session, untimed
        session.generate_ids(session.encode_chat([{"role": "user", "content": QUESTIONS[j % len(QUESTIONS)]}]),
                             max_new_tokens=4, temperature=0)
    return [{"round": r + 1, **_drive_in_process(sessions, clients, args)}
            for r in range(args.rounds) for clients in args.clients]


def run(args: argparse.Namespace) -> list[dict]:
    """One server (with --in-process: one loaded model); `args.rounds` rounds, each a run per client
    count of `args.clients`, in order (the counts interleaved, so that a slow spell of the machine hits
    them alike). Returns the runs."""
    if args.in_process:
        return _run_in_process(args)
    server, url = _start_server(args, max(args.clients))
    try:
        _warm_up(url, args.sessions)
        runs = []
        for r in range(args.rounds):
            for clients in args.clients:
                runs.append({"round": r + 1, **_drive(url, server, clients, args)})
        return runs
    finally:
        _stop_server(server)


def _step_rate(run: dict) -> float:
    """Tokens per second of the run's decode steps alone: mean batch / step time (0 without steps)."""
    return 1e3 * run["decode_batch_mean"] / run["decode_step_ms"] if run["decode_step_ms"] > 0 else 0.0


def _round_distance(*runs: dict) -> str:
    """How far apart the CPUs were through a round's runs (machine_state.distance of their probes)."""
    return distance([t for r in runs for t in (r["core_trip_ns"]["start"], r["core_trip_ns"]["end"])])


def summarize(runs: list[dict], clients: list[int]) -> dict:
    """Per client count: median decode tok/s, and its ratio to the first count's, round by round; and the
    same ratio for the decode steps alone (mean batch / step time as the sessions saw it), without the
    prefill, HTTP and waits that the run's tok/s includes: what the engine's batched step gives. The
    ratios also go by how far apart the CPUs were through each round (near, far, mixed: a VM's hypervisor
    moves its vCPUs, and batched steps slow down when they are far apart)."""
    base = clients[0]
    by_round: dict[int, dict[int, dict]] = {}
    for r in runs:
        by_round.setdefault(r["round"], {})[r["clients"]] = r
    out = {}
    for c in clients:
        rounds = [v for v in by_round.values() if c in v and base in v]
        ratios: list[float] = []
        by_distance: dict[str, list[float]] = {}
        for v in rounds:
            if v[base]["decode_tokens_per_s"]:
                ratios.append(v[c]["decode_tokens_per_s"] / v[base]["decode_tokens_per_s"])
                by_distance.setdefault(_round_distance(v[base], v[c]), []).append(ratios[-1])
        steps = [_step_rate(v[c]) / _step_rate(v[base]) for v in rounds if _step_rate(v[base])]
        out[str(c)] = {"median_tokens_per_s": statistics.median(v[c]["decode_tokens_per_s"] for v in by_round.values()),
                       "ratio_per_round": ratios, "median_ratio": statistics.median(ratios) if ratios else None,
                       "step_ratio_per_round": steps, "median_step_ratio": statistics.median(steps) if steps else None,
                       "ratio_by_distance": by_distance}
    return out


def _client_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--clients takes client counts separated by commas (e.g. 1,4), got {text!r}")
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"--clients counts must be >= 1 and different, got {text!r}")
    return counts


def _line(result: dict) -> str:
    cpu = (f"process {result['process_cpu_s']:.1f}" if result.get("in_process") else
           f"server {result['server_cpu_s']:.1f}, clients {result['client_cpu_s']:.1f}")
    return (f"{result['clients']} clients, {result['sessions']} sessions, {len(QUESTIONS)} questions, "
            f"{result['requests']} requests of <= {result['max_tokens']} tokens in {result['wall_s']:.1f} s: "
            f"{result['requests_per_s']:.2f} req/s, {result['decode_tokens_per_s']:.1f} tok/s, "
            f"TTFT p50 {result['ttft_p50_ms']:.0f} ms, p99 {result['ttft_p99_ms']:.0f} ms, "
            f"{result['errors']} errors; CPU s: {cpu}; decode steps: mean batch {result['decode_batch_mean']:.2f}, "
            f"{result['decode_step_ms']:.1f} ms each as a session saw it; prefill {result['prefill_tokens']} tokens, "
            f"{result['prefill_s']:.1f} s summed over requests; a {PROBE_MIB} MiB read before the run at "
            f"{result['read_gbs']:.1f} GB/s; {_trips(result['core_trip_ns'])}")


def _trips(trips: dict) -> str:
    """The CPUs' distance before and after a run (machine_state.trip_ns)."""
    if trips["start"] is None:
        return describe_trip(None)
    return f"{describe_trip(trips['start'])} before the run, {trips['end']:.0f} after"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("file", help="a .ember LLM file")
    p.add_argument("--sessions", type=int, default=4)
    p.add_argument("--clients", type=_client_counts, default=[4],
                   help="concurrent clients; several counts separated by commas (e.g. 1,4) run in turn, round "
                        "by round, and each is reported as a ratio to the first (default 4)")
    p.add_argument("--rounds", type=int, default=1, help="rounds over the client counts (default 1)")
    p.add_argument("--requests", type=int, default=32, help="requests per run (default 32)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--in-process", action="store_true",
                   help="drive the sessions of one ember.load in this process, a thread per client (no server): "
                        "the engine's figures without the serving layer; needs --clients <= --sessions")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.in_process and max(args.clients) > args.sessions:
        p.error(f"--in-process runs each client on its own session: --clients {max(args.clients)} needs --sessions "
                f">= {max(args.clients)}, got {args.sessions}")
    from ember.llm.cli_bench import machine

    m = machine()
    runs = run(args)
    single = len(runs) == 1
    summary = None if single else summarize(runs, args.clients)
    if args.json:
        print(json.dumps({**runs[0], "machine": m} if single else {"machine": m, "runs": runs, "summary": summary},
                         indent=2))
    else:
        print(f"machine: {m['cpu']}, {m['logical_cpus']} logical CPUs, ember kernels {m['isa']}" +
              (" (in-process: no server)" if args.in_process else ""))
        for result in runs:
            print(("" if single else f"round {result['round']}: ") + _line(result))
        if summary is not None and len(args.clients) > 1:
            base = args.clients[0]
            for c in args.clients[1:]:
                s = summary[str(c)]
                steps = ("" if s["median_step_ratio"] is None else
                         f" (decode steps alone: median {s['median_step_ratio']:.2f}x)")
                print(f"{c} vs {base} clients: " + ", ".join(f"{x:.2f}x" for x in s["ratio_per_round"]) +
                      f" per round, median {s['median_ratio']:.2f}x" + steps)
                groups = s["ratio_by_distance"]
                labels = {"near": f"CPUs near (round trips < {NEAR_NS:.0f} ns)", "far": f"far (> {FAR_NS:.0f} ns)",
                          "mixed": "mixed"}
                shown = [k for k in labels if k in groups]  # none with one CPU ("unknown")
                if shown:
                    print("  rounds by the CPUs' distance: " + "; ".join(
                        f"{labels[k]} " + ", ".join(f"{x:.2f}x" for x in groups[k]) +
                        f" (median {statistics.median(groups[k]):.2f}x)" for k in shown))
    return 1 if any(r["errors"] for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
