"""torch dtype <-> ember dtype codes (ember.fb.DType numbering)."""

from __future__ import annotations

import torch

from ember.export.errors import ExportError

TORCH_TO_CODE: dict[torch.dtype, int] = {
    torch.float32: 0,
    torch.float16: 1,
    torch.bfloat16: 2,
    torch.int64: 3,
    torch.int32: 4,
    torch.int8: 5,
    torch.uint8: 6,
    torch.bool: 7,
}


def dtype_code(dtype: torch.dtype, where: str) -> int:
    code = TORCH_TO_CODE.get(dtype)
    if code is None:
        supported = ", ".join(str(d).removeprefix("torch.") for d in TORCH_TO_CODE)
        raise ExportError(f"{where} has dtype {dtype}, which ember does not run (supported: {supported}); "
                          "cast the model or input to one of those (e.g. model.float())")
    return code


def tensor_bytes(t: torch.Tensor) -> bytes:
    """Raw little-endian bytes of a tensor, contiguous (bfloat16 via its bit pattern)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()
