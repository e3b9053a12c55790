"""Emit one method: values, instructions, delegates, state write-back and the memory plan."""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import torch
from torch.fx import Node

from ember.export import memory_planning
from ember.export.dtypes import dtype_code, tensor_bytes
from ember.export.errors import ExportError
from ember.export.graph import LoweringGraph, op_name, shape_bounds, source_of
from ember.export.partition import Partition
from ember.export.program import SegmentTable
from ember.export.sym_ops import SYM_OPS
from ember.fb.Bool import BoolT
from ember.fb.BoolList import BoolListT
from ember.fb.CopyCall import CopyCallT
from ember.fb.Delegate import DelegateT
from ember.fb.DelegateCall import DelegateCallT
from ember.fb.Double import DoubleT
from ember.fb.DoubleList import DoubleListT
from ember.fb.Instruction import InstructionT
from ember.fb.InstructionKind import InstructionKind
from ember.fb.Int import IntT
from ember.fb.IntList import IntListT
from ember.fb.KernelCall import KernelCallT
from ember.fb.KeyValue import KeyValueT
from ember.fb.Method import MethodT
from ember.fb.Null import NullT
from ember.fb.Operator import OperatorT
from ember.fb.Storage import Storage
from ember.fb.String import StringT
from ember.fb.Tensor import TensorT
from ember.fb.TensorList import TensorListT
from ember.fb.Value import ValueT
from ember.fb.ValueKind import ValueKind

# Kernels that may write their result over their first argument (`self`): a buffer mutation
# produced by one of these is computed directly in the program state, never copied back.
INPLACE_SAFE_OPS = frozenset({
    "aten::index_copy.default", "aten::index_put.default", "aten::slice_scatter.default",
    "aten::copy.default", "aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor", "aten::div.Tensor",
    "aten::add.Scalar", "aten::sub.Scalar", "aten::mul.Scalar", "aten::div.Scalar",
    "aten::masked_fill.Scalar", "aten::masked_fill.Tensor", "aten::neg.default",
})

END = 1 << 62  # lifetime end of values that outlive the method (outputs)


@dataclass(frozen=True)
class KernelInfo:
    num_args: int
    num_outputs: int
    view: bool


@dataclass
class _Producer:
    instr: int
    op: str
    args: list[int]


class MethodEmitter:
    def __init__(self, g: LoweringGraph, partitions: list[Partition], segments: SegmentTable,
                 state_index: dict[str, int], kernels: Mapping[str, KernelInfo]):
        self.g = g
        self.segments = segments
        self.state_index = state_index
        self.kernels = kernels
        self.values: list[ValueT] = []
        self.node_values: dict[Node, Any] = {}
        self.instrs: list[InstructionT] = []
        self.operators: list[str] = []
        self.op_index: dict[str, int] = {}
        self.delegates: list[DelegateT] = []
        self.partition_of: dict[Node, Partition] = {n: p for p in partitions for n in p.subgraph.nodes}
        self._consts: dict[tuple[str, Any], int] = {}
        self.alias_root: dict[int, int] = {}
        self.first_use: dict[int, int] = {}
        self.uses: dict[int, list[int]] = {}
        self.arena: dict[int, int] = {}            # value -> first instruction
        self.producer: dict[int, _Producer] = {}
        self.delegated_nodes = 0

    # --- values -----------------------------------------------------------------------------
    def _add(self, kind: int, obj: Any) -> int:
        v = ValueT()
        v.vType, v.v = kind, obj
        self.values.append(v)
        return len(self.values) - 1

    def _const(self, kind: str, value: Any) -> int:
        key = (kind, value)
        if key not in self._consts:
            if kind == "null":
                self._consts[key] = self._add(ValueKind.Null, NullT())
            elif kind == "int":
                o = IntT()
                o.v = int(value)
                self._consts[key] = self._add(ValueKind.Int, o)
            elif kind == "double":
                o = DoubleT()
                o.v = float(value)
                self._consts[key] = self._add(ValueKind.Double, o)
            elif kind == "bool":
                o = BoolT()
                o.v = bool(value)
                self._consts[key] = self._add(ValueKind.Bool, o)
            else:
                o = StringT()
                o.v = str(value)
                self._consts[key] = self._add(ValueKind.String, o)
        return self._consts[key]

    def _tensor(self, dtype: torch.dtype, shape: Iterable[Any], storage: int, where: str) -> TensorT:
        t = TensorT()
        t.dtype = dtype_code(dtype, where)
        t.sizes, t.dynamic = shape_bounds(shape, self.g.range_constraints, where)
        t.storage = storage
        t.nbytes = math.prod(t.sizes) * torch.empty((), dtype=dtype).element_size()
        return t

    def _new_tensor(self, val: torch.Tensor, storage: int, where: str) -> int:
        return self._add(ValueKind.Tensor, self._tensor(val.dtype, val.shape, storage, where))

    def _value_of(self, node: Node) -> Any:
        if node in self.node_values:
            return self.node_values[node]
        if node in self.g.constants:
            t = self.g.constants[node]
            tt = self._tensor(t.dtype, t.shape, Storage.Constant, f"constant '{node.name}'")
            tt.segment = self.segments.add(tensor_bytes(t))
            tt.name = self.g.constant_names.get(node, node.name)
            idx = self._add(ValueKind.Tensor, tt)
        elif node in self.g.state:
            name = self.g.state[node]
            idx = self._state_value(name, node.meta["val"])
        else:
            raise ExportError(f"internal: value of node '{node.name}' used before it was computed")
        self.node_values[node] = idx
        return idx

    def _state_value(self, name: str, val: torch.Tensor) -> int:
        tt = self._tensor(val.dtype, val.shape, Storage.State, f"state '{name}'")
        tt.state = self.state_index[name]
        return self._add(ValueKind.Tensor, tt)

    def _use(self, idx: int, instr: int) -> None:
        root = self.alias_root.get(idx, idx)
        self.uses.setdefault(root, []).append(instr)

    def _is_tensor_value(self, idx: int) -> bool:
        return self.values[idx].vType == ValueKind.Tensor

    def _arg(self, v: Any, type_str: str, instr: int) -> int:
        if isinstance(v, Node):
            idx = self._value_of(v)
            if isinstance(idx, list):
                raise ExportError(f"internal: multi-output node '{v.name}' used directly")
            if self._is_tensor_value(idx):
                self._use(idx, instr)
            return idx
        if v is None or isinstance(v, (torch.device, torch.layout, torch.memory_format)):
            return self._const("null", None)
        if isinstance(v, bool):
            return self._const("bool", v)
        if isinstance(v, int):
            return self._const("int", v)
        if isinstance(v, float):
            return self._const("double", v)
        if isinstance(v, str):
            return self._const("str", v)
        if isinstance(v, torch.dtype):
            return self._const("int", dtype_code(v, "dtype argument"))
        if isinstance(v, (list, tuple)):
            return self._list(list(v), type_str, instr)
        raise ExportError(f"argument {v!r} of type {type(v).__name__} cannot be stored in an ember program")

    def _list(self, items: list[Any], type_str: str, instr: int) -> int:
        tensorish = "Tensor" in type_str or any(
            isinstance(x, Node) and isinstance(x.meta.get("val"), torch.Tensor) for x in items)
        if tensorish:
            o = TensorListT()
            o.items = [-1 if x is None else self._arg(x, "", instr) for x in items]
            return self._add(ValueKind.TensorList, o)
        if items and all(isinstance(x, bool) for x in items):
            o = BoolListT()
            o.items = list(items)
            return self._add(ValueKind.BoolList, o)
        if "float" in type_str or any(isinstance(x, float) for x in items):
            o = DoubleListT()
            o.items = [float(x) for x in items]
            return self._add(ValueKind.DoubleList, o)
        o = IntListT()
        o.items = [self._arg(x, "", instr) for x in items]
        return self._add(ValueKind.IntList, o)

    # --- instructions -----------------------------------------------------------------------
    def _op(self, name: str) -> int:
        if name not in self.op_index:
            self.op_index[name] = len(self.operators)
            self.operators.append(name)
        return self.op_index[name]

    def _schema_args(self, node: Node) -> list[tuple[str, Any]]:
        if node.target in SYM_OPS:
            return [("int", a) for a in node.args]
        out = []
        for i, a in enumerate(node.target._schema.arguments):
            if not a.kwarg_only and i < len(node.args):
                v = node.args[i]
            elif a.name in node.kwargs:
                v = node.kwargs[a.name]
            elif a.has_default_value():
                v = a.default_value
            else:
                raise ExportError(f"{source_of(node)}: {op_name(node.target)} is missing argument '{a.name}'")
            out.append((str(a.type), v))
        return out

    def _outputs(self, node: Node, view: bool, instr: int, where: str) -> list[int]:
        val = node.meta.get("val")
        storage = Storage.Alias if view else Storage.Arena
        if isinstance(val, torch.Tensor):
            idx = self._new_tensor(val, storage, where)
            self.node_values[node] = idx
            self._defined(idx, instr, view)
            return [idx]
        if isinstance(val, (torch.SymInt, int)):
            o = IntT()
            o.v = int(val) if isinstance(val, int) else 0
            idx = self._add(ValueKind.Int, o)
            self.node_values[node] = idx
            return [idx]
        if isinstance(val, (list, tuple)):
            elems = []
            for k, e in enumerate(val):
                if not isinstance(e, torch.Tensor):
                    raise ExportError(f"{where}: output {k} is {type(e).__name__}, expected a tensor")
                idx = self._new_tensor(e, storage, f"{where} output {k}")
                self._defined(idx, instr, view)
                elems.append(idx)
            self.node_values[node] = elems
            returns = node.target._schema.returns
            if len(returns) == 1 and isinstance(returns[0].type, torch.ListType):
                o = TensorListT()
                o.items = elems
                return [self._add(ValueKind.TensorList, o)]
            return elems
        raise ExportError(f"{where}: result of type {type(val).__name__} is not supported")

    def _defined(self, idx: int, instr: int, view: bool) -> None:
        if not view:
            self.arena[idx] = instr

    def _emit_kernel(self, node: Node) -> None:
        name = op_name(node.target)
        info = self.kernels[name]
        instr = len(self.instrs)
        where = f"{name} ({source_of(node)})"
        args = [self._arg(v, t, instr) for t, v in self._schema_args(node)]
        outs = self._outputs(node, info.view, instr, where)
        if len(args) != info.num_args or len(outs) != info.num_outputs:
            raise ExportError(f"{where}: emitted {len(args)} arguments and {len(outs)} outputs but the runtime "
                              f"kernel takes {info.num_args} and {info.num_outputs} (ember version mismatch?)")
        if info.view:
            src = args[0]
            for o in outs:
                self.alias_root[o] = self.alias_root.get(src, src)
        elif len(outs) == 1:
            self.producer[outs[0]] = _Producer(instr, name, args)
        kc = KernelCallT()
        kc.op, kc.args, kc.outputs = self._op(name), args, outs
        self._append(InstructionKind.KernelCall, kc)

    def _emit_delegate(self, part: Partition) -> None:
        sub = part.subgraph
        instr = len(self.instrs)
        args = [self._arg(n, "", instr) for n in sub.inputs]
        outs = []
        for n in sub.outputs:
            idx = self._new_tensor(n.meta["val"], Storage.Arena, f"delegate output '{n.name}'")
            self.node_values[n] = idx
            self._defined(idx, instr, False)
            outs.append(idx)
        backend = part.partitioner.backend
        blob = backend.preprocess(sub, part.partitioner.compile_specs)
        d = DelegateT()
        d.backend = backend.id
        d.segment = self.segments.add(blob)
        d.nodes = sum(1 for n in sub.nodes if n.target is not operator.getitem)
        d.compileSpecs = []
        for spec in part.partitioner.compile_specs + backend.subgraph_compile_specs(sub):
            kv = KeyValueT()
            kv.key, kv.value = spec.key, list(spec.value)
            d.compileSpecs.append(kv)
        self.delegates.append(d)
        self.delegated_nodes += d.nodes
        dc = DelegateCallT()
        dc.delegate, dc.args, dc.outputs = len(self.delegates) - 1, args, outs
        self._append(InstructionKind.DelegateCall, dc)

    def _append(self, kind: int, obj: Any) -> None:
        ins = InstructionT()
        ins.iType, ins.i = kind, obj
        self.instrs.append(ins)

    # --- state ------------------------------------------------------------------------------
    def _write_back(self, value: Node, name: str) -> None:
        placeholder = next(p for p, n in self.g.state.items() if n == name)
        dst = self._value_of(placeholder)
        src = self._value_of(value) if isinstance(value, Node) else None
        if src is None or isinstance(src, list):
            raise ExportError(f"method '{self.g.name}': buffer '{name}' is assigned a non-tensor")
        if src == dst:
            return
        prod = self.producer.get(src)
        if prod is not None and src in self.arena and self._can_update_in_place(prod, dst):
            t = self.values[src].v
            t.storage, t.state = Storage.State, self.state_index[name]
            del self.arena[src]
            return
        instr = len(self.instrs)
        self._use(src, instr)
        cc = CopyCallT()
        cc.src, cc.dst = src, dst
        self._append(InstructionKind.CopyCall, cc)
        self.g.notes.append(f"state '{name}' is copied back after each call (no in-place producer)")

    def _can_update_in_place(self, prod: _Producer, state_value: int) -> bool:
        if prod.op not in INPLACE_SAFE_OPS or not prod.args or prod.args[0] != state_value:
            return False
        for a in prod.args[1:]:
            if self._is_tensor_value(a) and self.alias_root.get(a, a) == state_value:
                return False
        return all(u <= prod.instr for u in self.uses.get(state_value, []))

    # --- driver -----------------------------------------------------------------------------
    def emit(self) -> MethodT:
        g = self.g
        inputs = []
        for node in g.inputs:
            idx = self._new_tensor(node.meta["val"], Storage.Input, f"input '{node.name}'")
            self.node_values[node] = idx
            inputs.append(idx)
        emitted: set[int] = set()
        for node in g.graph.nodes:
            if node.op != "call_function":
                continue
            part = self.partition_of.get(node)
            if part is not None:
                if id(part) not in emitted:
                    emitted.add(id(part))
                    self._emit_delegate(part)
                continue
            if node.target is operator.getitem:
                src = self._value_of(node.args[0])
                self.node_values[node] = src[node.args[1]]
                continue
            self._emit_kernel(node)
        outputs = []
        for v in g.user_outputs:
            if isinstance(v, Node):
                idx = self._value_of(v)
                if self._is_tensor_value(idx):
                    self._use(idx, END)
            elif v is None or isinstance(v, (bool, int, float)):
                idx = self._arg(v, "", END)
            else:
                raise ExportError(f"method '{g.name}': output {v!r} is not a tensor or scalar")
            outputs.append(idx)
        for value, name in g.mutations:
            self._write_back(value, name)
        return self._finish(inputs, outputs)

    def _finish(self, inputs: list[int], outputs: list[int]) -> MethodT:
        buffers = []
        for idx, first in self.arena.items():
            uses = self.uses.get(idx, [])
            last = max([first] + uses)
            buffers.append(memory_planning.Buffer(idx, int(self.values[idx].v.nbytes), first, last))
        arena_size = memory_planning.plan(buffers)
        for b in buffers:
            self.values[b.key].v.offset = b.offset
        m = MethodT()
        m.name = self.g.name
        m.values = self.values
        m.inputs, m.outputs = inputs, outputs
        m.instructions = self.instrs
        m.operators = []
        for name in self.operators:
            o = OperatorT()
            o.name = name
            m.operators.append(o)
        m.delegates = self.delegates
        m.arenaSize = arena_size
        m.activationBytes = sum(b.size for b in buffers)
        return m
