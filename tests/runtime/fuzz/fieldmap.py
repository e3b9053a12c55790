"""Where every field of a packed .ember flatbuffer lies: the fuzzer's map of the file.

A small generic flatbuffer walker driven by a transcription of export/program.fbs. It records
each scalar field, union tag, vector length, vector element and table/vector/string offset
with its absolute byte position in the file, so mutations edit fields in place (no repacking:
microseconds per mutant) and can break what a writer never would, e.g. a vector's length.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# Field types: scalars as struct formats; ("table", T), ("vector", ELEM), ("union", {tag: T}),
# "string", ("struct", size, [(offset, fmt, name)]).
_VALUE_KINDS = ["Tensor", "Int", "Double", "Bool", "IntList", "DoubleList", "BoolList", "TensorList", "String", "Null"]
_INSTR_KINDS = ["KernelCall", "DelegateCall", "CopyCall"]
_META_KINDS = ["MetaInt", "MetaDouble", "MetaBool", "MetaString", "MetaIntList", "MetaBytes"]

SCHEMA: dict[str, list[tuple[str, object]]] = {
    "Program": [("methods", ("vector", ("table", "Method"))), ("state", ("vector", ("table", "StateTensor"))),
                ("metadata", ("vector", ("table", "MetaEntry"))),
                ("segments", ("vector", ("struct", 16, [(0, "Q", "offset"), (8, "Q", "size")])))],
    "Method": [("name", "string"), ("values", ("vector", ("table", "Value"))), ("inputs", ("vector", "i")),
               ("outputs", ("vector", "i")), ("instructions", ("vector", ("table", "Instruction"))),
               ("operators", ("vector", ("table", "Operator"))), ("delegates", ("vector", ("table", "Delegate"))),
               ("arena_size", "Q"), ("activation_bytes", "Q")],
    "Tensor": [("dtype", "b"), ("sizes", ("vector", "q")), ("dynamic", ("vector", "B")), ("storage", "b"),
               ("offset", "Q"), ("segment", "I"), ("state", "I"), ("nbytes", "Q"), ("name", "string")],
    "Int": [("v", "q")], "Double": [("v", "d")], "Bool": [("v", "B")],
    "IntList": [("items", ("vector", "i"))], "DoubleList": [("items", ("vector", "d"))],
    "BoolList": [("items", ("vector", "B"))], "TensorList": [("items", ("vector", "i"))],
    "String": [("v", "string")], "Null": [],
    "Value": [("v_type", "B"), ("v", ("union", _VALUE_KINDS))],
    "KernelCall": [("op", "I"), ("args", ("vector", "i")), ("outputs", ("vector", "i"))],
    "DelegateCall": [("delegate", "I"), ("args", ("vector", "i")), ("outputs", ("vector", "i"))],
    "CopyCall": [("src", "i"), ("dst", "i")],
    "Instruction": [("i_type", "B"), ("i", ("union", _INSTR_KINDS))],
    "Operator": [("name", "string")],
    "KeyValue": [("key", "string"), ("value", ("vector", "B"))],
    "Delegate": [("backend", "string"), ("segment", "I"), ("compile_specs", ("vector", ("table", "KeyValue"))),
                 ("nodes", "I")],
    "StateTensor": [("name", "string"), ("dtype", "b"), ("sizes", ("vector", "q")), ("init_segment", "i")],
    "MetaInt": [("v", "q")], "MetaDouble": [("v", "d")], "MetaBool": [("v", "B")], "MetaString": [("v", "string")],
    "MetaIntList": [("v", ("vector", "q"))], "MetaBytes": [("segment", "I")],
    "MetaEntry": [("key", "string"), ("value_type", "B"), ("value", ("union", _META_KINDS))],
}


@dataclass(frozen=True)
class Field:
    pos: int       # absolute byte offset in the file
    fmt: str       # struct format of the bytes at pos ("I" for offsets and vector lengths)
    kind: str      # "scalar", "union_type", "vector_length", "element", "offset", "table_element"
    path: str      # e.g. "methods[0].values[3].Tensor.offset"
    vector: int = -1   # for "table_element": position of the vector's first element
    count: int = 0     # for "vector_length" / "table_element": the vector's length


class _Walker:
    def __init__(self, buf: bytes, base: int) -> None:
        self.buf, self.base, self.fields = buf, base, []  # base: the flatbuffer's offset in the file
        self.seen: set[int] = set()

    def u32(self, p: int) -> int:
        return struct.unpack_from("<I", self.buf, p)[0]

    def table(self, pos: int, name: str, path: str) -> None:
        if pos in self.seen or not 0 <= pos < len(self.buf) - 4:
            return
        self.seen.add(pos)
        vt = pos - struct.unpack_from("<i", self.buf, pos)[0]
        vt_size = struct.unpack_from("<H", self.buf, vt)[0]
        slot = 0
        union_tag = 0
        for fname, ftype in SCHEMA[name]:
            off = struct.unpack_from("<H", self.buf, vt + 4 + 2 * slot)[0] if 4 + 2 * slot < vt_size else 0
            slot += 1
            if off == 0:
                continue
            at = pos + off
            fpath = f"{path}.{fname}"
            if isinstance(ftype, str) and ftype != "string":
                kind = "union_type" if fname.endswith("_type") else "scalar"
                self.fields.append(Field(self.base + at, ftype, kind, fpath))
                if kind == "union_type":
                    union_tag = self.buf[at]
                continue
            self.fields.append(Field(self.base + at, "I", "offset", fpath))
            target = at + self.u32(at)
            if ftype == "string":
                self.fields.append(Field(self.base + target, "I", "vector_length", fpath, count=self.u32(target)))
            elif ftype[0] == "table":
                self.table(target, ftype[1], fpath)
            elif ftype[0] == "union":
                if 1 <= union_tag <= len(ftype[1]):
                    self.table(target, ftype[1][union_tag - 1], f"{fpath}.{ftype[1][union_tag - 1]}")
            elif ftype[0] == "vector":
                self.vector(target, ftype[1], fpath)

    def vector(self, pos: int, elem: object, path: str) -> None:
        n = self.u32(pos)
        self.fields.append(Field(self.base + pos, "I", "vector_length", path, count=n))
        first = pos + 4
        if isinstance(elem, str):
            size = struct.calcsize(elem)
            for k in range(n):
                self.fields.append(Field(self.base + first + k * size, elem, "element", f"{path}[{k}]"))
        elif elem[0] == "struct":
            for k in range(n):
                for off, fmt, fname in elem[2]:
                    self.fields.append(Field(self.base + first + k * elem[1] + off, fmt, "scalar",
                                             f"{path}[{k}].{fname}"))
        else:
            for k in range(n):
                at = first + 4 * k
                self.fields.append(Field(self.base + at, "I", "table_element", f"{path}[{k}]", vector=self.base + first,
                                         count=n))
                self.table(at + self.u32(at), elem[1], f"{path}[{k}]")


def field_map(data: bytes) -> list[Field]:
    """Every field of the program table of a valid .ember file (header fields included)."""
    fb_offset, fb_size = struct.unpack_from("<QQ", data, 16)
    fb = data[fb_offset: fb_offset + fb_size]
    w = _Walker(fb, fb_offset)
    w.table(struct.unpack_from("<I", fb, 0)[0], "Program", "program")
    header = [Field(off, fmt, "scalar", f"header.{name}") for off, fmt, name in
              ((8, "I", "major"), (12, "I", "minor"), (16, "Q", "fb_offset"), (24, "Q", "fb_size"),
               (32, "Q", "data_offset"), (40, "Q", "data_size"))]
    return header + w.fields
