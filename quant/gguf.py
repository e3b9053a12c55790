"""Exact GGUF import: a GGUF file's quantized tensors replace the dequantized weights of the
model transformers loaded from that file, keeping their exact values.

transformers loads a GGUF by dequantizing every tensor to float. ``apply_gguf_weights`` maps the
file (``gguf.GGUFReader``, memory-mapped, read once), converts each quantized matrix to ember's
canonical format (``gguf_blocks``), applies the row permutation transformers applied on load
(llama's q/k), checks that the result dequantizes to exactly the weight the model holds, and
swaps the ``nn.Linear`` / ``nn.Embedding`` for a ``QuantizedLinear`` / ``QuantizedEmbedding``
(weight-only). A tied lm_head becomes a ``QuantizedLinear`` over the embedding's very tensors.
F32 / F16 / BF16 matrices stay the float modules transformers built (checked too).

The GGUF-name -> module mapping and the row permutations are the ones transformers' GGUF loader
used: gguf-py's tensor-name table with transformers' per-architecture ``TENSOR_PROCESSORS``
(``transformers.modeling_gguf_pytorch_utils``), which also tell which rows were permuted (the
processor is run on a column of row indices). The exactness check catches anything else.

Call it on the model in its final dtype: ``model.to(dtype)`` afterwards would convert the float
scales and offsets too (they are buffers), and the weights would no longer be the GGUF's.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import torch
import gguf
from gguf import MODEL_ARCH_NAMES, GGMLQuantizationType, GGUFReader, get_tensor_name_map
from torch import nn

from .gguf_blocks import (FLOAT_TYPES, QUANTIZED_TYPES, SUPPORTED_TYPES, UnsupportedGGUFType, convert_gguf_tensor,
                          unsupported_type_error)
from .modules import QuantizedEmbedding, QuantizedLinear, QuantizedWeight

__all__ = ["apply_gguf_weights", "GGUFImportReport", "GGUFTensorImport", "ImportKind", "OnUnsupported",
           "GGUFImportError", "UnsupportedGGUFType", "SUPPORTED_TYPES"]


class GGUFImportError(ValueError):
    """The GGUF file and the model disagree (the message names the tensor and what differs)."""


class OnUnsupported(str, Enum):
    """What ``apply_gguf_weights`` does with a matrix whose GGUF type has no exact converter."""

    ERROR = "error"  # raise UnsupportedGGUFType naming the tensor, its type and the supported types
    KEEP_FLOAT = "keep_float"  # keep the float weight transformers dequantized, with a warning


class ImportKind(str, Enum):
    QUANTIZED = "quantized"  # replaced by a Quantized* module holding the GGUF's exact codes
    FLOAT = "float"  # an F32/F16/BF16 tensor: the float module stays
    DEQUANTIZED = "dequantized"  # an unsupported type kept as transformers' float (OnUnsupported.KEEP_FLOAT)


@dataclass(frozen=True)
class GGUFTensorImport:
    """One GGUF matrix and the module(s) it became."""

    module: str  # HF module name (the first module using the tensor)
    gguf_name: str
    gguf_type: str  # GGML type name, e.g. "Q4_K"
    shape: tuple[int, int]  # [rows (out features / vocabulary), cols]
    kind: ImportKind
    bits: int | None  # None unless QUANTIZED
    group_size: int | None
    nbytes: int  # bytes as exported: canonical codes + parameters, or the float weight in the model's dtype
    gguf_nbytes: int  # bytes in the GGUF file
    shared_with: tuple[str, ...] = ()  # other modules reading the same tensors (a tied lm_head)
    rows_permuted: bool = False  # transformers permuted the rows on load (llama q/k)


@dataclass
class GGUFImportReport:
    path: str
    architecture: str
    tensors: list[GGUFTensorImport] = field(default_factory=list)
    unused_gguf_tensors: list[str] = field(default_factory=list)  # matrices of the file no Linear/Embedding uses
    float_modules: list[str] = field(default_factory=list)  # Linear/Embedding modules no GGUF tensor quantizes

    def _of(self, kind: ImportKind) -> list[GGUFTensorImport]:
        return [t for t in self.tensors if t.kind is kind]

    @property
    def quantized(self) -> list[GGUFTensorImport]:
        return self._of(ImportKind.QUANTIZED)

    @property
    def quantized_bytes(self) -> int:
        """Bytes of the canonical quantized tensors (each shared table once)."""
        return sum(t.nbytes for t in self.quantized)

    @property
    def float_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors if t.kind is not ImportKind.QUANTIZED)

    @property
    def total_bytes(self) -> int:
        return self.quantized_bytes + self.float_bytes

    @property
    def gguf_bytes(self) -> int:
        """Bytes the same tensors take in the GGUF file."""
        return sum(t.gguf_nbytes for t in self.tensors)

    def summary(self) -> str:
        types: dict[str, int] = {}
        for t in self.quantized:
            types[t.gguf_type] = types.get(t.gguf_type, 0) + 1
        mib = 1 << 20
        lines = [
            f"GGUF import ({self.architecture}) from {Path(self.path).name}: {len(self.quantized)} quantized "
            f"tensors ({', '.join(f'{n} {k}' for k, n in sorted(types.items())) or 'none'}), "
            f"{len(self.tensors) - len(self.quantized)} float; {self.quantized_bytes / mib:.1f} MiB quantized + "
            f"{self.float_bytes / mib:.1f} MiB float (GGUF: {self.gguf_bytes / mib:.1f} MiB)",
        ]
        tied = [t for t in self.tensors if t.shared_with]
        if tied:
            lines.append("shared: " + "; ".join(f"{t.module} = {', '.join(t.shared_with)}" for t in tied))
        dequantized = self._of(ImportKind.DEQUANTIZED)
        if dequantized:
            names = ", ".join(f"{t.gguf_name} ({t.gguf_type})" for t in dequantized)
            lines.append(f"kept dequantized (unsupported type): {names}")
        if self.float_modules:
            lines.append("float modules with no GGUF tensor: " + ", ".join(self.float_modules))
        return "\n".join(lines)


# ---- transformers' GGUF loader: name map and per-tensor processing --------------------------------

def _transformers_gguf_mapping(model: nn.Module, reader: GGUFReader, architecture: str) -> tuple[dict[str, str], Any]:
    """(GGUF tensor name -> HF parameter name, transformers' tensor processor for this architecture).

    The names come from gguf-py's ``get_tensor_name_map`` table and the processor's
    ``preprocess_name`` / ``perform_fallback_tensor_mapping``: what transformers'
    ``get_gguf_hf_weights_map`` does, built once for the whole model (that function rebuilds the
    table for every submodule, which takes longer than the rest of the import).
    """
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor

    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=model.config.to_dict())
    arch = next((key for key, name in MODEL_ARCH_NAMES.items() if name == architecture), None)
    if arch is None:
        raise GGUFImportError(f"GGUF architecture {architecture!r} is unknown to gguf-py {gguf.__version__}")
    block_count = reader.fields.get(f"{architecture}.block_count")
    if block_count is None:
        raise GGUFImportError(f"the GGUF file has no {architecture}.block_count field")
    table = get_tensor_name_map(arch, int(block_count.contents()))
    name_map: dict[str, str] = {}
    for hf_name in model.state_dict():
        hf_name = processor.preprocess_name(hf_name)
        stem, dot, suffix = hf_name.rpartition(".")
        if suffix not in ("weight", "bias"):
            stem, suffix = hf_name, ""
        suffix = f".{suffix}" if suffix else ""
        gguf_name = table.get_name(stem)
        if gguf_name is None:
            processor.perform_fallback_tensor_mapping(name_map, suffix, "", hf_name)
            continue
        name_map[gguf_name + suffix] = hf_name
    return name_map, processor


def _row_permutation(processor: Any, gguf_name: str, rows: int, name_map: dict[str, str]) -> torch.Tensor | None:
    """The rows transformers' processor reorders this tensor into (int64 [rows]), or None when it
    keeps them: found by passing it a column of row indices."""
    probe = np.arange(rows, dtype=np.float64).reshape(rows, 1)
    result = processor.process(weights=probe, name=gguf_name, tensor_key_mapping=name_map,
                               parsed_parameters={"tensors": {}})
    out = np.asarray(result.weights)
    if result.name != gguf_name or out.shape != (rows, 1) or not np.array_equal(np.sort(out[:, 0]), probe[:, 0]):
        raise GGUFImportError(
            f"transformers' {type(processor).__name__} transforms GGUF tensor {gguf_name!r} in a way that is not a "
            "row permutation (e.g. splits or merges it); ember cannot import it exactly. Export without quant='gguf'"
        )
    perm = out[:, 0].astype(np.int64)
    return None if np.array_equal(perm, np.arange(rows)) else torch.from_numpy(perm)


# ---- checks ---------------------------------------------------------------------------------------

def _check_equal(expected: torch.Tensor, weight: torch.Tensor, gguf_name: str, module: str, qtype: str) -> None:
    """The import must reproduce the loaded weight exactly (cast to its dtype as transformers did)."""
    if tuple(expected.shape) != tuple(weight.shape):
        raise GGUFImportError(f"GGUF tensor {gguf_name!r} ({qtype}) is {list(expected.shape)} but {module}.weight "
                              f"is {list(weight.shape)}: the model was not loaded from this GGUF file")
    expected = expected.to(weight.dtype)
    if not torch.equal(expected, weight.detach()):
        err = float((expected.float() - weight.detach().float()).abs().max())
        raise GGUFImportError(
            f"GGUF tensor {gguf_name!r} ({qtype}) does not reproduce {module}.weight exactly (max |difference| "
            f"{err:.3g}): the model was not loaded from this GGUF file, or transformers transformed the tensor "
            "in a way ember does not mirror. Export without quant='gguf'"
        )


def _check_same_forward(old: nn.Module, new: nn.Module, name: str) -> None:
    """A subclass of nn.Linear / nn.Embedding (Gemma's scaled embedding) may compute more than a
    plain lookup or product: the replacement must compute what it did on a few inputs."""
    if type(old) in (nn.Linear, nn.Embedding):
        return
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        if isinstance(old, nn.Embedding):
            idx = torch.randint(0, old.num_embeddings, (8,), generator=generator)
            same = torch.equal(old(idx), new(idx))
        else:
            x = torch.randn(2, old.in_features, generator=generator).to(old.weight.dtype)
            want, got = old(x).float(), new(x).float()
            same = bool(torch.allclose(got, want, rtol=1e-3, atol=1e-5 * float(want.abs().max()) + 1e-30))
    if not same:
        raise GGUFImportError(f"{name} ({type(old).__name__}) computes something other than {type(new).__name__} does "
                              "with the same weight (its forward is not a plain linear / embedding lookup); "
                              "ember's GGUF import cannot replace it. Export without quant='gguf'")


# ---- patching -------------------------------------------------------------------------------------

def _embed_scale(module: nn.Embedding) -> torch.Tensor | None:
    """HF's scaled word embeddings (Gemma's) multiply the rows by an ``embed_scale`` buffer."""
    if type(module) is nn.Embedding:
        return None
    return dict(module.named_buffers(recurse=False)).get("embed_scale")


def _replacement(module: nn.Module, weight: QuantizedWeight) -> nn.Module:
    if isinstance(module, nn.Embedding):
        return QuantizedEmbedding(weight, dtype=module.weight.dtype, embed_scale=_embed_scale(module))
    return QuantizedLinear(weight, bias=module.bias)


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


def _weight_users(model: nn.Module) -> dict[int, list[str]]:
    """id(weight parameter) -> names of the Linear/Embedding modules using it (tied ones share)."""
    users: dict[int, list[str]] = {}
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            users.setdefault(id(module.weight), []).append(name)
    return users


def _architecture(reader: GGUFReader) -> str:
    field = reader.fields.get("general.architecture")
    if field is None:
        raise GGUFImportError(f"{reader.data.filename} has no general.architecture field: it is not a model GGUF")
    return str(field.contents())


def apply_gguf_weights(model: nn.Module, gguf_file: str | Path | GGUFReader,
                       on_unsupported: OnUnsupported | str = OnUnsupported.ERROR) -> GGUFImportReport:
    """Replaces, in place, every ``nn.Linear`` / ``nn.Embedding`` of ``model`` whose GGUF tensor is
    quantized with a ``QuantizedLinear`` / ``QuantizedEmbedding`` holding the file's exact values
    (weight-only); F32/F16/BF16 tensors keep their float modules.

    ``model``: the ``*ForCausalLM`` transformers loaded from this very file
    (``from_pretrained(dir, gguf_file=name)``, any float dtype). ``gguf_file``: its path, or an open
    ``gguf.GGUFReader``. Every imported tensor is checked to dequantize to exactly the weight the
    model holds (``GGUFImportError`` otherwise). ``on_unsupported``: see ``OnUnsupported``.
    Call it before wrapping the model for export and never change the model's dtype afterwards.
    """
    policy = OnUnsupported(on_unsupported)
    reader = gguf_file if isinstance(gguf_file, GGUFReader) else GGUFReader(Path(gguf_file))
    architecture = _architecture(reader)
    report = GGUFImportReport(path=str(reader.data.filename), architecture=architecture)
    name_map, processor = _transformers_gguf_mapping(model, reader, architecture)
    users = _weight_users(model)
    covered: set[int] = set()

    for tensor in reader.tensors:
        if len(tensor.shape) != 2:
            continue  # norms, biases: transformers' float values stay
        hf_name = name_map.get(tensor.name, "")
        module_name = hf_name.removesuffix(".weight")
        module = model.get_submodule(module_name) if hf_name.endswith(".weight") else None
        if not isinstance(module, (nn.Linear, nn.Embedding)):
            report.unused_gguf_tensors.append(tensor.name)
            continue
        qtype = GGMLQuantizationType(tensor.tensor_type)
        rows, cols = int(tensor.shape[1]), int(tensor.shape[0])  # GGUF's ne is (cols, rows)
        names = users[id(module.weight)]
        covered.add(id(module.weight))
        common = dict(module=names[0], gguf_name=tensor.name, gguf_type=qtype.name, shape=(rows, cols),
                      gguf_nbytes=int(tensor.n_bytes), shared_with=tuple(names[1:]))
        float_bytes = module.weight.numel() * module.weight.element_size()

        if qtype not in QUANTIZED_TYPES and qtype not in FLOAT_TYPES:
            if policy is OnUnsupported.ERROR:
                raise unsupported_type_error(tensor.name, qtype)
            warnings.warn(f"GGUF tensor {tensor.name!r} has type {qtype.name}, which ember cannot import exactly: "
                          f"{names[0]} keeps the float weight transformers dequantized", stacklevel=2)
            report.tensors.append(GGUFTensorImport(kind=ImportKind.DEQUANTIZED, bits=None, group_size=None,
                                                   nbytes=float_bytes, **common))
            continue

        perm = _row_permutation(processor, tensor.name, rows, name_map)
        converted = convert_gguf_tensor(tensor.name, tensor.data, qtype, (rows, cols))
        if isinstance(converted, torch.Tensor):  # F32 / F16 / BF16: the float module stays
            expected = converted if perm is None else converted.index_select(0, perm)
            _check_equal(expected.float(), module.weight, tensor.name, names[0], qtype.name)
            report.tensors.append(GGUFTensorImport(kind=ImportKind.FLOAT, bits=None, group_size=None,
                                                   nbytes=float_bytes, rows_permuted=perm is not None, **common))
            continue

        weight = converted if perm is None else converted.select_rows(perm)
        _check_equal(weight.dequantize(), module.weight, tensor.name, names[0], qtype.name)
        for name in names:  # a tied lm_head shares the embedding's buffers (same tensor objects)
            old = model.get_submodule(name)
            new = _replacement(old, weight)
            _check_same_forward(old, new, name)
            _replace(model, name, new)
        report.tensors.append(GGUFTensorImport(kind=ImportKind.QUANTIZED, bits=weight.bits,
                                               group_size=weight.group_size,
                                               nbytes=weight.nbytes, rows_permuted=perm is not None, **common))

    report.float_modules = [n for key, names in users.items() if key not in covered for n in names]
    return report
