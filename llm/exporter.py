"""``export_llm``: HF checkpoint / GGUF -> torch.export -> ember lowering -> .ember file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
import transformers
from tqdm.auto import tqdm

from . import hf_compat
from .config import DType, ExportConfig, LogitsMode
from .exportable import ExportableLLM
from .source import LoadedSource, load_source, tokenizer_config_json

__all__ = ["export_llm", "build_metadata", "export_program", "StageTimer"]


def _ember_version() -> str:
    try:
        from importlib.metadata import version

        return version("ember")
    except Exception:  # not installed (source tree)
        return "0.0.0+source"


def _special_ids(loaded: LoadedSource) -> tuple[int | None, list[int], int | None]:
    tok = loaded.tokenizer
    gen = loaded.generation_config
    config = loaded.model.config
    bos = tok.bos_token_id if tok.bos_token_id is not None else config.bos_token_id
    eos_ids: list[int] = []
    for candidate in (tok.eos_token_id, config.eos_token_id, gen.eos_token_id if gen is not None else None):
        for token_id in candidate if isinstance(candidate, (list, tuple)) else [candidate]:
            if token_id is not None and int(token_id) not in eos_ids:
                eos_ids.append(int(token_id))
    pad = tok.pad_token_id if tok.pad_token_id is not None else config.pad_token_id
    return (int(bos) if bos is not None else None), eos_ids, (int(pad) if pad is not None else None)


def build_metadata(loaded: LoadedSource, wrapper: ExportableLLM, config: ExportConfig) -> dict[str, Any]:
    """The program's key/value metadata (python int/float/bool/str/list[int]/bytes only)."""
    bos, eos_ids, pad = _special_ids(loaded)
    geometry = wrapper.cache.geometry
    hf_config = hf_compat.text_config(loaded.model.config)
    metadata: dict[str, Any] = {
        "llm.family": wrapper.adapter.model_type,
        "llm.max_seq_len": config.max_seq_len,
        "llm.max_context_len": config.max_context_len,
        "llm.vocab_size": wrapper.vocab_size,
        "llm.logits": config.logits.value,
        "llm.kv_dtype": {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
                         torch.int8: "int8"}[wrapper.cache.dtype],
        "llm.eos_ids": eos_ids,
        "llm.n_layers": geometry.n_layers,
        "llm.n_kv_heads": geometry.n_kv_heads,
        "llm.head_dim": geometry.head_dim,
        "llm.sliding_windows": wrapper.quirks.sliding_windows,
        "llm.hidden_size": int(hf_config.hidden_size),
        "llm.n_heads": int(hf_config.num_attention_heads),
        "llm.rope_type": wrapper.quirks.rope_type,
        "tokenizer.kind": loaded.tokenizer_kind.value,
        "tokenizer.data": loaded.tokenizer_data,
        "tokenizer.config": tokenizer_config_json(loaded.tokenizer, bos, eos_ids, pad),
        "export.ember_version": _ember_version(),
        "export.torch_version": torch.__version__,
        "export.transformers_version": transformers.__version__,
        "export.source": loaded.name,
        "export.dtype": config.dtype.value,
        "export.time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    theta = hf_compat.rope_theta(hf_config)
    if theta is not None:
        metadata["llm.rope_theta"] = theta
    if bos is not None:
        metadata["llm.bos_id"] = bos
    if pad is not None:
        metadata["llm.pad_id"] = pad
    template = loaded.tokenizer.chat_template
    if isinstance(template, str) and template:
        metadata["chat.template"] = template
    gen = loaded.generation_config
    if gen is not None:
        # Only what the checkpoint sets (to_diff_dict drops GenerationConfig's defaults).
        chosen = gen.to_diff_dict()
        for key in ("temperature", "top_p", "top_k", "repetition_penalty"):
            if chosen.get(key) is not None:
                metadata[f"generation.{key}"] = int(chosen[key]) if key == "top_k" else float(chosen[key])
        # Always written: to_diff_dict drops do_sample=False (transformers' default), yet with it a
        # checkpoint's temperature is ignored and decoding is greedy; ember's runner must do the same.
        metadata["generation.do_sample"] = bool(chosen.get("do_sample", gen.do_sample))
    return metadata


class StageTimer:
    """Wall time of each export stage, for the summary and ``export.stage_seconds``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.started = time.perf_counter()
        self._started = self.started

    def done(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = round(now - self._started, 2)
        self._started = now

    def summary(self) -> str:
        return ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())


def _quant_arg(quant: Any) -> Any:
    """None | "gguf" | a QuantRecipe (a preset name is resolved here, before anything loads)."""
    if quant is None:
        return None
    from ember.quant.presets import GGUF, get_preset
    from ember.quant.recipe import QuantRecipe

    if isinstance(quant, QuantRecipe) or quant == GGUF:
        return quant
    if isinstance(quant, str):
        return get_preset(quant)
    raise ValueError(f"quant must be a preset name, 'gguf' or a QuantRecipe, got {type(quant).__name__}")


def _quantize(loaded: LoadedSource, source: Any, quant: Any, progress: bool, activations: Any = None) -> dict[str, Any]:
    """Quantizes the loaded model in place (then sets the weight-only linears' activations);
    returns the quant.* metadata."""
    from ember.quant.activations import LinearActivations, apply_linear_activations

    activations = LinearActivations.parse(activations or LinearActivations.FLOAT)
    metadata = _quantize_weights(loaded, source, quant, progress)
    changed = apply_linear_activations(loaded.model, activations)
    metadata["quant.activations"] = activations.value
    if changed and progress:
        print(f"  {changed} weight-only linears quantize their activations to int8 per group (--qactivations int8)")
    return metadata


def _quantize_weights(loaded: LoadedSource, source: Any, quant: Any, progress: bool) -> dict[str, Any]:
    from ember.quant.presets import GGUF

    if quant == GGUF:
        from ember.quant.gguf import apply_gguf_weights

        path = Path(str(source)) if not isinstance(source, torch.nn.Module) else None
        if path is None or path.suffix.lower() != ".gguf":
            raise ValueError(f"--quant gguf keeps a GGUF file's own blocks; the source {loaded.name!r} is not a "
                             ".gguf file (use a recipe such as --quant q4 for other sources)")
        report = apply_gguf_weights(loaded.model, loaded.extra.get("gguf_reader", path))
        if progress:
            print(report.summary())
        return {"quant.recipe": GGUF, "quant.summary": report.summary()}
    from ember.quant.apply import quantize_model
    from ember.quant.canonical_modules import to_canonical_modules

    plan = quantize_model(loaded.model, quant)
    # torchao's weights -> ember's canonical modules over the same values: torch.export then traces one
    # ember::quantized_* call per module instead of torchao's dequantize (+ dynamic quantize) pattern.
    to_canonical_modules(loaded.model)
    if progress:
        print(plan.summary())
    metadata: dict[str, Any] = {"quant.recipe": quant.name, "quant.json": quant.to_json(),
                                "quant.summary": plan.summary()}
    for part in ("linear", "embedding", "output"):
        spec = getattr(quant, part)
        metadata[f"quant.{part}"] = spec.describe() if spec is not None else ("auto" if part == "output" else "float")
    return metadata


def export_program(
    source: Any,
    config: ExportConfig,
    tokenizer: Any = None,
    progress: bool = True,
    quant: Any = None,
    timer: StageTimer | None = None,
    lowering: bool = False,
    qactivations: Any = None,
) -> tuple[torch.export.ExportedProgram, dict[str, Any], ExportableLLM]:
    """Load (+ quantize) + torch.export only (no lowering): the ExportedProgram, its metadata and the wrapper.

    lowering: the caller passes the program to ``ember.export.lower`` (which functionalizes it), so
        the functionalization pass is skipped here.
    """
    timer = timer or StageTimer()
    quant = _quant_arg(quant)
    with tqdm(total=3, desc="ember export", unit="stage", disable=not progress) as bar:
        bar.set_postfix_str("loading")
        loaded = load_source(source, config.dtype.value, tokenizer)
        timer.done("load")
        bar.update(1)
        # Before quantizing (which swaps weights for packed tensors); tied weights counted once.
        n_params = sum(p.numel() for p in loaded.model.parameters())
        quant_metadata = {}
        if quant is not None:
            bar.set_postfix_str("quantizing")
            quant_metadata = _quantize(loaded, source, quant, progress, qactivations)
            timer.done("quantize")
        bar.update(1)
        wrapper = ExportableLLM(loaded.model, config)
        bar.set_postfix_str("torch.export")
        exported = wrapper.export(functionalize=not lowering)
        timer.done("torch.export")
        bar.update(1)
    metadata = build_metadata(loaded, wrapper, config)
    metadata["llm.n_params"] = int(n_params)
    metadata.update(quant_metadata)
    return exported, metadata, wrapper


def resolve_backend(backend: str | None, quant: Any) -> str | None:
    """The delegate an export partitions to: "auto" picks ``cpu`` for quantized exports (its packed
    kernels run them) and none for full precision; "portable" / None mean no delegate."""
    if backend == "auto":
        return "cpu" if quant is not None else None
    return None if backend in (None, "portable") else backend


def export_llm(
    source: Any,
    output: str | Path | None = None,
    *,
    max_context_len: int = 2048,
    max_seq_len: int = 128,
    dtype: str | DType = "float32",
    quant: Any = None,
    backend: str | None = "auto",
    logits: str | LogitsMode = "last",
    tokenizer: Any = None,
    progress: bool = True,
    qactivations: str = "float",
    kv_dtype: str = "auto",
):
    """Export a decoder-only HF LLM to one ``.ember`` file and return the lowered ``Program``.

    source: a local HF checkpoint folder (config.json, safetensors, tokenizer.json or
        tokenizer.model, chat template), a ``.gguf`` file, or a ``PreTrainedModel``
        (then pass ``tokenizer=``).
    output: the file to write; default ``<source name>.ember`` in the current folder;
        nothing is written when the source is an in-memory model and output is None.
    max_context_len: KV cache slots (prompt + generated tokens).
    max_seq_len: the most tokens one call takes (prefill chunk); decode uses 1.
    dtype: "float32" | "bfloat16" | "float16" weights/activations.
    quant: None (full precision), a preset name ("q8", "q4", "8da4w"), "gguf" (keep a GGUF
        source's own quantized blocks exactly) or an ``ember.quant.QuantRecipe``.
    backend: "auto" (the default: the ``cpu`` delegate when ``quant`` is set, else the portable
        kernels), "portable" or None (portable kernels only), or the name of an ember delegate.
    logits: "last" ([1, vocab], generation) or "all" ([1, T, vocab], evals).
    qactivations: what the weight-only quantized linears compute with: "float" (exact, the
        default) or "int8" (dynamic int8 per group of the weight's group size, as llama.cpp's
        Q8_0 activations: much faster on the CPU delegate, at a small quality cost; see
        ``ember.quant.activations``). Needs ``quant``.
    kv_dtype: what the KV cache stores: "auto" (the activations' dtype), "fp32", "fp16" or "int8"
        (int8 codes with one fp32 scale per token and head; ``ember::quantize_kv``).
    """
    from ember.quant.activations import LinearActivations

    config = ExportConfig(max_context_len=max_context_len, max_seq_len=max_seq_len, dtype=dtype, logits=logits,
                          kv_dtype=kv_dtype)
    quant = _quant_arg(quant)  # a bad preset fails here, before anything loads
    qactivations = LinearActivations.parse(qactivations)
    if quant is None and qactivations is not LinearActivations.FLOAT:
        raise ValueError(f"qactivations={qactivations.value!r} applies to quantized linears; choose a quantization "
                         "too (e.g. quant='gguf' or quant='q4')")
    try:
        from ember.export import lower
    except ImportError as error:
        raise ImportError(
            f"ember.export.lower is not available ({error}); install ember with its export extra "
            "(pip install -e '.[export]')"
        ) from error

    from ember.export.backend import get_partitioner

    backend = resolve_backend(backend, quant)
    partitioners = (get_partitioner(backend),) if backend is not None else ()  # fail before the slow part
    timer = StageTimer()
    exported, metadata, _ = export_program(source, config, tokenizer=tokenizer, progress=progress, quant=quant,
                                           timer=timer, lowering=True, qactivations=qactivations)
    with tqdm(total=2, desc="ember lower", unit="stage", disable=not progress) as bar:
        bar.set_postfix_str("lowering")
        program = lower(exported, partitioners=partitioners, metadata={**metadata, "export.backend": backend or "portable"},
                        export_started=timer.started)
        timer.done("lower")
        bar.update(1)
        bar.set_postfix_str("writing")
        if output is None and not isinstance(source, torch.nn.Module):
            output = Path(Path(str(source)).name).with_suffix(".ember")
        size = program.save(str(output), progress=progress) if output is not None else program.size
        timer.done("write")
        bar.update(1)
    if progress:
        print(program.summary())
        where = f"wrote {output}" if output is not None else "in memory"
        print(f"{where}: {size / 2**20:.1f} MiB in {sum(timer.seconds.values()):.1f} s ({timer.summary()})")
    return program
