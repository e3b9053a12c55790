"""`ember.export.Program`: the Python view of a .ember file (build, save, load, summary)."""

from __future__ import annotations

import collections
import mmap
import os
from typing import Any, BinaryIO, Union

import flatbuffers

from ember.export import format as fmt
from ember.export.state_summary import StateTensor, state_lines
from ember.fb.MetaBool import MetaBoolT
from ember.fb.MetaBytes import MetaBytesT
from ember.fb.MetaDouble import MetaDoubleT
from ember.fb.MetaEntry import MetaEntryT
from ember.fb.MetaInt import MetaIntT
from ember.fb.MetaIntList import MetaIntListT
from ember.fb.MetaString import MetaStringT
from ember.fb.MetaValue import MetaValue
from ember.fb.Program import Program as FbProgram
from ember.fb.Program import ProgramT
from ember.fb.Segment import SegmentT
from ember.fb.Storage import Storage
from ember.fb.ValueKind import ValueKind
from ember.fb.InstructionKind import InstructionKind

Buffer = Union[bytes, bytearray, memoryview]
MetaPy = Union[int, float, bool, str, bytes, list]

DTYPE_NAMES = {0: "float32", 1: "float16", 2: "bfloat16", 3: "int64", 4: "int32", 5: "int8", 6: "uint8", 7: "bool"}


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class SegmentTable:
    """Deduplicated data segments (weights, delegate blobs, large metadata values)."""

    def __init__(self) -> None:
        self.segments: list[Buffer] = []
        self._index: dict[bytes, int] = {}

    def add(self, data: Buffer) -> int:
        import hashlib

        key = hashlib.blake2b(data, digest_size=20).digest() + len(data).to_bytes(8, "little")
        found = self._index.get(key)
        if found is not None:
            return found
        self.segments.append(data)
        self._index[key] = len(self.segments) - 1
        return len(self.segments) - 1


def encode_metadata(metadata: dict[str, MetaPy], segments: SegmentTable) -> list[MetaEntryT]:
    """Typed metadata entries, sorted by key; bytes values go to data segments."""
    entries = []
    for key in sorted(metadata):
        value = metadata[key]
        e = MetaEntryT()
        e.key = key
        if isinstance(value, bool):
            e.valueType, e.value = MetaValue.MetaBool, MetaBoolT()
            e.value.v = value
        elif isinstance(value, int):
            e.valueType, e.value = MetaValue.MetaInt, MetaIntT()
            e.value.v = value
        elif isinstance(value, float):
            e.valueType, e.value = MetaValue.MetaDouble, MetaDoubleT()
            e.value.v = value
        elif isinstance(value, str):
            e.valueType, e.value = MetaValue.MetaString, MetaStringT()
            e.value.v = value
        elif isinstance(value, (bytes, bytearray, memoryview)):
            e.valueType, e.value = MetaValue.MetaBytes, MetaBytesT()
            e.value.segment = segments.add(bytes(value))
        elif isinstance(value, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            e.valueType, e.value = MetaValue.MetaIntList, MetaIntListT()
            e.value.v = [int(x) for x in value]
        else:
            raise TypeError(
                f"metadata '{key}' has a value of type {type(value).__name__}; use int, float, bool, str, "
                "bytes or a list of ints")
        entries.append(e)
    return entries


def _decode_meta(e: MetaEntryT, segments: list[Buffer]) -> MetaPy:
    if e.valueType == MetaValue.MetaBytes:
        return bytes(segments[e.value.segment])
    if e.valueType == MetaValue.MetaIntList:
        return [int(x) for x in (e.value.v if e.value.v is not None else [])]
    v = e.value.v
    return v.decode() if isinstance(v, bytes) else v


class Program:
    """An in-memory .ember program: the flatbuffer object tree plus its data segments."""

    def __init__(self, root: ProgramT, segments: list[Buffer]):
        self.root = root
        self.segments = segments

    # --- construction / IO ------------------------------------------------------------------
    def _layout(self) -> list[tuple[int, int]]:
        offsets, pos = [], 0
        for seg in self.segments:
            size = len(memoryview(seg).cast("B"))
            pos = fmt.align(pos, fmt.segment_alignment(size))
            offsets.append((pos, size))
            pos += size
        return offsets

    def _pack(self, force_defaults: bool = False) -> tuple[bytes, list[tuple[int, int]], fmt.Header]:
        """The flatbuffer (with the segment table filled in), the segment layout and the header.
        `force_defaults` writes scalar fields even when they hold their default (for the fuzzer)."""
        layout = self._layout()
        self.root.segments = []
        for off, size in layout:
            s = SegmentT()
            s.offset, s.size = off, size
            self.root.segments.append(s)
        builder = flatbuffers.Builder(1 << 16)
        builder.ForceDefaults(force_defaults)
        builder.Finish(self.root.Pack(builder), file_identifier=b"EMBR")
        fb_bytes = bytes(builder.Output())
        data_offset = fmt.align(fmt.HEADER_SIZE + len(fb_bytes), fmt.PAGE_ALIGN)
        data_size = layout[-1][0] + layout[-1][1] if layout else 0
        header = fmt.Header(fmt.FORMAT_MAJOR, fmt.FORMAT_MINOR, fmt.HEADER_SIZE, len(fb_bytes), data_offset, data_size)
        return fb_bytes, layout, header

    def write(self, f: BinaryIO, progress: Any = None, force_defaults: bool = False) -> int:
        fb_bytes, layout, header = self._pack(force_defaults)
        f.write(header.pack())
        f.write(fb_bytes)
        f.write(b"\0" * (header.data_offset - header.fb_offset - len(fb_bytes)))
        pos = 0
        for seg, (off, size) in zip(self.segments, layout):
            f.write(b"\0" * (off - pos))
            f.write(seg)
            pos = off + size
            if progress is not None:
                progress.update(size)
        return header.data_offset + header.data_size

    def save(self, path: str | os.PathLike[str], progress: bool = False) -> int:
        """Writes the program to `path` (atomically: a temp file renamed into place). Returns bytes written."""
        path = os.fspath(path)
        tmp = f"{path}.tmp{os.getpid()}"
        bar = None
        if progress:
            from tqdm import tqdm

            total = sum(len(memoryview(s).cast("B")) for s in self.segments)
            bar = tqdm(total=total, unit="B", unit_scale=True, desc="writing", leave=False)
        try:
            with open(tmp, "wb") as f:
                n = self.write(f, bar)
            os.replace(tmp, path)
        finally:
            if bar is not None:
                bar.close()
            if os.path.exists(tmp):
                os.remove(tmp)
        return n

    def to_bytes(self, force_defaults: bool = False) -> bytes:
        """The file's bytes; `force_defaults` writes every scalar field, also those at their default
        (a larger but equivalent file, whose every field the fuzzer can then edit in place)."""
        import io

        buf = io.BytesIO()
        self.write(buf, force_defaults=force_defaults)
        return buf.getvalue()

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Program":
        """Reads a .ember file (segments stay memory-mapped)."""
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return cls.from_buffer(memoryview(mm))

    @classmethod
    def from_buffer(cls, buf: Buffer) -> "Program":
        view = memoryview(buf)
        header = fmt.Header.unpack(bytes(view[: fmt.HEADER_SIZE]), len(view))
        fb = bytes(view[header.fb_offset: header.fb_offset + header.fb_size])
        root = ProgramT.InitFromObj(FbProgram.GetRootAs(fb, 0))
        base = header.data_offset
        segments = [view[base + s.offset: base + s.offset + s.size] for s in _seq(root.segments)]
        return cls(root, segments)

    # --- views --------------------------------------------------------------------------------
    @property
    def methods(self) -> list[str]:
        return [_s(m.name) for m in _seq(self.root.methods)]

    @property
    def metadata(self) -> dict[str, MetaPy]:
        return {_s(e.key): _decode_meta(e, self.segments) for e in _seq(self.root.metadata)}

    @property
    def size(self) -> int:
        """Bytes the file will have."""
        header = self._pack()[2]
        return header.data_offset + header.data_size

    def method_stats(self, name: str) -> dict[str, Any]:
        """Op histogram, delegated nodes per backend, arena and activation sizes of one method."""
        m = next((m for m in _seq(self.root.methods) if _s(m.name) == name), None)
        if m is None:
            raise KeyError(f"no method '{name}' (methods: {', '.join(self.methods)})")
        ops = collections.Counter()
        delegated = collections.Counter()
        for ins in _seq(m.instructions):
            if ins.iType == InstructionKind.KernelCall:
                ops[_s(m.operators[ins.i.op].name)] += 1
            elif ins.iType == InstructionKind.DelegateCall:
                d = m.delegates[ins.i.delegate]
                delegated[_s(d.backend)] += d.nodes
            else:
                ops["<copy to state>"] += 1
        return {
            "inputs": [_tensor_desc(m.values[i].v) for i in _seq(m.inputs)],
            "outputs": [_value_desc(m.values[i]) for i in _seq(m.outputs)],
            "instructions": len(_seq(m.instructions)),
            "ops": dict(ops.most_common()),
            "delegated_nodes": dict(delegated),
            "portable_nodes": sum(ops.values()),
            "arena_size": int(m.arenaSize),
            "activation_bytes": int(m.activationBytes),
            # Distinct bytes: values that alias one stored tensor (a tied table) count once.
            "constants_bytes": sum({
                (int(v.v.segment), int(v.v.offset)): int(v.v.nbytes) for v in _seq(m.values)
                if v.vType == ValueKind.Tensor and v.v.storage == Storage.Constant}.values()),
        }

    def state_tensors(self) -> list[StateTensor]:
        """The program's state (the KV cache): name, dtype and shape of each tensor."""
        return [StateTensor(_s(st.name), str(DTYPE_NAMES.get(st.dtype, st.dtype)),
                            tuple(int(x) for x in _seq(st.sizes))) for st in _seq(self.root.state)]

    def summary(self) -> str:
        lines = []
        seg_sizes = [len(memoryview(s).cast("B")) for s in self.segments]
        lines.append(f"ember program: {len(self.methods)} method(s), {len(self.segments)} segment(s) "
                     f"({_human(sum(seg_sizes))}), {len(_seq(self.root.metadata))} metadata entries")
        lines.extend(f"  {line}" for line in state_lines(self.state_tensors(), _human))
        for name in self.methods:
            s = self.method_stats(name)
            lines.append(f"  method {name}: {s['instructions']} instructions")
            lines.append(f"    inputs:  {', '.join(s['inputs'])}")
            lines.append(f"    outputs: {', '.join(s['outputs'])}")
            ratio = (s["arena_size"] / s["activation_bytes"] * 100) if s["activation_bytes"] else 0.0
            lines.append(f"    arena: {_human(s['arena_size'])} for {_human(s['activation_bytes'])} of activations "
                         f"({ratio:.0f}%), constants: {_human(s['constants_bytes'])}")
            deleg = ", ".join(f"{k}: {v} nodes" for k, v in s["delegated_nodes"].items()) or "none"
            lines.append(f"    delegated: {deleg}; portable kernels: {s['portable_nodes']} calls")
            top = ", ".join(f"{k} x{v}" for k, v in list(s["ops"].items())[:12])
            lines.append(f"    ops: {top}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"ember.export.Program(methods={self.methods}, segments={len(self.segments)})"


def _seq(x: Any) -> Any:
    """A flatbuffer vector field: None when absent, else a list or numpy array (never test its truth)."""
    return [] if x is None else x


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else ("" if x is None else str(x))


def _tensor_desc(t: Any) -> str:
    sizes = list(t.sizes) if t.sizes is not None else []
    dyn = list(t.dynamic) if t.dynamic is not None else [False] * len(sizes)
    dims = ", ".join(f"<={s}" if d else str(s) for s, d in zip(sizes, dyn))
    return f"{DTYPE_NAMES.get(t.dtype, t.dtype)}[{dims}]"


def _value_desc(v: Any) -> str:
    if v.vType == ValueKind.Tensor:
        return _tensor_desc(v.v)
    return {ValueKind.Int: "int", ValueKind.Double: "float", ValueKind.Bool: "bool"}.get(v.vType, "value")
