"""A zoo of modules: exported -> lowered -> saved -> loaded -> run equals eager PyTorch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.export import Dim

from ember.export import lower
from tests.helpers import assert_close, export, run_module, to_ember


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 64)
        self.fc3 = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.nn.functional.gelu(self.fc2(torch.relu(self.fc1(x)))))


class DecoderBlock(torch.nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.SiLU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class Counter(torch.nn.Module):
    """A mutable buffer updated across calls (state lives in the program, updated in place)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.total.add_(x.sum(0))
        self.steps.add_(1)
        return self.total * 1.0, self.steps + 0


def test_mlp(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = MLP().eval()
    x = torch.randn(5, 32)
    _, (out,) = run_module(m, (x,), tmp_path=tmp_path)
    assert_close(out, m(x))


@pytest.mark.parametrize("t", [1, 3, 8, 16])
def test_decoder_block_dynamic_seq(tmp_path: Path, t: int) -> None:
    torch.manual_seed(0)
    m = DecoderBlock().eval()
    seq = Dim("seq", min=1, max=16)
    prog = to_ember(export(m, (torch.randn(2, 4, 32),), ({1: seq},)), tmp_path)
    x = torch.randn(2, t, 32)
    (out,) = prog.run("forward", x)
    assert_close(out, m(x), rtol=1e-5, atol=1e-5)


def test_mutable_buffer_updated_across_calls(tmp_path: Path) -> None:
    m = Counter()
    ref = Counter()
    prog = to_ember(export(m, (torch.randn(3, 4),)), tmp_path)
    for _ in range(3):
        x = torch.randn(3, 4)
        total, steps = prog.run("forward", x)
        e_total, e_steps = ref(x)
        assert_close(total, e_total)
        assert int(steps) == int(e_steps)
    prog.reset_state()
    total, steps = prog.run("forward", torch.ones(3, 4))
    assert_close(total, torch.full((4,), 3.0))
    assert int(steps) == 1


def test_state_is_updated_in_place_not_copied(tmp_path: Path) -> None:
    """A cache written with index_copy_ must be planned in place: no copy-back instruction."""

    class Cache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("cache", torch.zeros(1, 2, 64, 4))

        def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            positions = torch.arange(x.shape[2]) + pos
            self.cache.index_copy_(2, positions, x)
            return self.cache.sum(2)

    t = Dim("t", min=1, max=8)
    program = lower(export(Cache(), (torch.randn(1, 2, 3, 4), torch.tensor([0])), ({2: t}, None)))
    stats = program.method_stats("forward")
    assert "<copy to state>" not in stats["ops"], stats["ops"]
    path = tmp_path / "c.ember"
    program.save(path)
    import ember.runtime

    prog = ember.runtime.load(path)
    ref = Cache()
    pos = 0
    for n in (3, 1, 1, 5):
        x = torch.randn(1, 2, n, 4)
        (out,) = prog.run("forward", x, torch.tensor([pos]))
        assert_close(out, ref(x, torch.tensor([pos])))
        pos += n


def test_two_methods_share_state(tmp_path: Path) -> None:
    class Writer(torch.nn.Module):
        def __init__(self, shared: torch.Tensor) -> None:
            super().__init__()
            self.register_buffer("memory", shared)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.memory.copy_(x)
            return x.sum()

    class Reader(torch.nn.Module):
        def __init__(self, shared: torch.Tensor) -> None:
            super().__init__()
            self.register_buffer("memory", shared)

        def forward(self, y: torch.Tensor) -> torch.Tensor:
            return self.memory * y

    shared = torch.zeros(4)
    programs = {"write": export(Writer(shared), (torch.randn(4),)), "read": export(Reader(shared), (torch.randn(4),))}
    prog = to_ember(programs, tmp_path)
    assert sorted(prog.methods) == ["read", "write"]
    x = torch.randn(4)
    prog.run("write", x)
    (out,) = prog.run("read", torch.full((4,), 2.0))
    assert_close(out, x * 2)


def test_tiny_llama_forward_no_cache(tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).eval()

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids, use_cache=False).logits

    seq = Dim("seq", min=1, max=32)
    prog = to_ember(export(Wrapper(), (torch.randint(0, 128, (1, 8)),), ({1: seq},)), tmp_path)
    for t in (1, 7, 32):
        ids = torch.randint(0, 128, (1, t))
        (out,) = prog.run("forward", ids)
        with torch.no_grad():
            assert_close(out, model(input_ids=ids, use_cache=False).logits, rtol=1e-5, atol=1e-5)
