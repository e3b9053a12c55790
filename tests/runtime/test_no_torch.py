"""`pip install .` into a fresh venv without torch, then load and run a saved program there."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import numpy as np
import pytest
import torch

from ember.export import lower
from tests.helpers import export

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys, numpy as np
assert "torch" not in sys.modules
import ember, ember.runtime
prog = ember.runtime.load(sys.argv[1])
x = np.load(sys.argv[2])
(out,) = prog.run("forward", x)
np.save(sys.argv[3], out)
try:
    import torch
except ImportError:
    print("torch absent")
else:
    raise SystemExit("torch is installed in the no-torch venv")
assert "torch" not in sys.modules
"""


@pytest.mark.slow
def test_install_and_run_without_torch(tmp_path: Path) -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.fc(x), dim=-1)

    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(3, 8)
    path = tmp_path / "net.ember"
    lower(export(net, (x,))).save(path)
    np.save(tmp_path / "x.npy", x.numpy())

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    # A separate build dir keeps this build apart from the developer/editable one; a Debug build (-O0)
    # compiles in about half the time, and what this test checks (the install and its imports) is the same.
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(REPO), "-C", f"build-dir={tmp_path / 'build'}",
                    "-C", "cmake.build-type=Debug"], check=True)
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([str(py), str(script), str(path), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "torch absent" in proc.stdout
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), net(x).detach().numpy(), rtol=1e-5, atol=1e-6)
