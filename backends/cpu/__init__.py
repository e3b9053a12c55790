"""ember.backends.cpu: the CPU delegate for quantized weights.

`CpuPartitioner` takes every `ember::quantized_linear` and `ember::quantized_embedding` whose weight
it can pack; `CpuBackend.preprocess` packs the weight once, at export, into the layout of the
micro-kernels (`packing.py`: rows interleaved 16 to a block, codes unsigned for the int8 dot
products, per-row sums precomputed); the C++ backend `ember.cpu` (runtime/) maps that blob and runs
it with per-ISA kernels (portable, AVX2, AVX-512, AVX-512 VNNI). A tied embedding and lm_head pack
to the same bytes, which the file stores once.
"""

from ember.backends.cpu.partitioner import CpuBackend, CpuPartitioner

__all__ = ["CpuBackend", "CpuPartitioner"]
