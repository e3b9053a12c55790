"""lm-evaluation-harness model "ember": scores and generates with a .ember file.

Importing this module registers the model with lm-eval (lm-eval has no plugin discovery, so its own
`lm_eval` command does not know "ember"); run lm-eval through ember's wrapper instead, with the same
arguments:

    python -m ember.evals.lm_eval_main --model ember --model_args path=smol.ember,threads=2 \\
        --tasks ember_tiny --include_path tests/evals/data

or from Python:

    import lm_eval, ember.evals.lm_eval_adapter
    lm_eval.simple_evaluate(model="ember", model_args="path=smol.ember", tasks=[...])

loglikelihood / loglikelihood_rolling run the file through ember.runtime (a file exported with
`--logits all` scores a continuation in one call per chunk; otherwise token by token), reusing the
KV cache of a context shared by consecutive requests; generate_until uses ember's text runner
(`ember.load(path).generate`, greedy unless the task asks to sample).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm.auto import tqdm

from ember.evals.errors import EvalError
from ember.evals.file_model import FileModel
from ember.evals.metrics import log_softmax

__all__ = ["EmberLM"]

DEFAULT_MAX_GEN_TOKS = 256


@register_model("ember")
class EmberLM(TemplateLM):
    """model_args: path=FILE (or pretrained=FILE), threads=N, max_length=N (default: the file's
    llm.max_context_len), mmap=True (map the file instead of reading it). batch_size/device are
    accepted and ignored: ember runs one sequence at a time on the CPU."""

    def __init__(self, path: str | None = None, pretrained: str | None = None, threads: int | None = None,
                 max_length: int | None = None, mmap: bool = False, batch_size: Any = None,
                 max_batch_size: Any = None, device: Any = None, **unused: Any) -> None:
        super().__init__()
        path = path or pretrained
        if not path:
            raise EvalError("the ember lm-eval model needs the file: --model_args path=FILE.ember")
        if unused:
            raise EvalError(f"unknown model_args for ember: {sorted(unused)}; "
                            "known: path, threads, max_length, mmap (batch_size, device are ignored)")
        self.path = os.fspath(path)
        self.threads = int(threads) if threads is not None else None
        self.mmap = bool(mmap)
        self.model = FileModel(self.path, threads=self.threads, mmap=self.mmap)
        self._max_length = int(max_length) if max_length is not None else self.model.max_context_len
        if not 2 <= self._max_length <= self.model.max_context_len:
            raise EvalError(f"max_length must be in [2, {self.model.max_context_len}] (llm.max_context_len), "
                            f"got {max_length}")
        self.tokenizer = self.model.tokenizer  # ember.llm.tokenizer.Tokenizer
        eos = self.tokenizer.eos_ids or list(self.model.metadata.get("llm.eos_ids") or [])
        if not eos:
            raise EvalError(f"'{self.path}' has no EOS id (llm.eos_ids); lm-eval needs one as end-of-text")
        self._eot = int(eos[0])
        self._bos = self.model.bos_prefix
        self._llm: Any = None  # the generate runner, loaded on the first generate_until

    # --- what TemplateLM needs ------------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self._eot

    @property
    def prefix_token_id(self) -> int:
        # what an empty context (and a rolling window's start) conditions on
        return self._bos if self._bos is not None else self._eot

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def tokenizer_name(self) -> str:
        return os.path.basename(self.path)

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        # None: as the model's tokenizer does by default (BOS where the model wants one)
        return list(self.tokenizer.encode(string, add_special_tokens=add_special_tokens is not False))

    def tok_decode(self, tokens: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens)

    def _score(self, context: list[int], continuation: list[int]) -> tuple[float, bool]:
        """log p(continuation | context) and whether greedy decoding would produce it."""
        seq = (context + continuation)[-(self._max_length + 1):]
        n_cont = min(len(continuation), len(seq) - 1)
        inputs = seq[:-1]
        logits = self.model.logits(inputs, start=len(inputs) - n_cont)  # [n_cont, V]
        targets = np.asarray(seq[-n_cont:], dtype=np.int64)
        logprobs = log_softmax(logits)  # [n_cont, V] float64
        total = float(logprobs[np.arange(n_cont), targets].sum())
        greedy = bool((logprobs.argmax(axis=-1) == targets).all())
        return total, greedy

    def _loglikelihood_tokens(self, requests: list[tuple[tuple[str, str], list[int], list[int]]],
                              disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        # Sorted by token sequence, requests sharing a context follow each other and reuse its K/V.
        order = sorted(range(len(requests)), key=lambda i: requests[i][1] + requests[i][2])
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        for i in tqdm(order, desc="ember loglikelihood", disable=disable_tqdm):
            key, context, continuation = requests[i]
            if not continuation:
                raise EvalError(f"empty continuation for context {key[0][-40:]!r}")
            results[i] = self._score(list(context), list(continuation))
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, results[i])
        return results  # type: ignore[return-value]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        out = []
        for request in tqdm(requests, desc="ember loglikelihood_rolling", disable=disable_tqdm):
            (string,) = request.args
            tokens = self.tok_encode(string, add_special_tokens=False)
            windows = map(make_disjoint_window, get_rolling_token_windows(
                token_list=tokens, prefix_token=self.prefix_token_id, max_seq_len=self._max_length, context_len=1))
            total = sum(self._score(list(ctx), list(pred))[0] for ctx, pred in windows)
            self.cache_hook.add_partial("loglikelihood_rolling", (string,), total)
            out.append(total)
        return out

    # --- generation -----------------------------------------------------------------------
    @property
    def llm(self) -> Any:
        if self._llm is None:
            from ember.llm.api import load

            self._llm = load(self.path, threads=self.threads, mmap=self.mmap)
        return self._llm

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        out = []
        for request in tqdm(requests, desc="ember generate_until", disable=disable_tqdm):
            context, gen_kwargs = request.args
            kwargs = dict(gen_kwargs or {})
            until = kwargs.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kwargs.pop("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
            do_sample = bool(kwargs.pop("do_sample", False))
            temperature = float(kwargs.pop("temperature", 0.0)) if do_sample else 0.0
            settings: dict[str, Any] = {"temperature": temperature}
            if do_sample and kwargs.get("top_p") is not None:
                settings["top_p"] = float(kwargs["top_p"])
            if do_sample and kwargs.get("top_k") is not None:
                settings["top_k"] = int(kwargs["top_k"])
            ids = self.llm.encode(context)
            max_new = max(1, min(max_new, self._max_length - 1))
            ids = ids[-(self._max_length - max_new):]  # keep the end of a long context
            text = self.llm.generate(ids, max_new_tokens=max_new, stop=[s for s in until if s] or None,
                                     ignore_eos=False, **settings)
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
            out.append(text)
        return out

    # --- chat templates -------------------------------------------------------------------
    def chat_template(self, chat_template: bool | str = False) -> str | None:
        if not chat_template:
            return None
        return self.model.metadata.get("chat.template")

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.llm.chat_template.render(list(chat_history), add_generation_prompt=add_generation_prompt)

    def get_model_info(self) -> dict[str, Any]:
        md = self.model.metadata
        return {"model_name": self.path, "model_family": md.get("llm.family"), "model_dtype": md.get("export.dtype"),
                "model_logits": self.model.logits_mode.value}
