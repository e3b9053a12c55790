"""Every `ember` subcommand reports a bad argument or input the same way: one line,
`ember COMMAND: error: MESSAGE` on stderr (argparse's own form), exit status 2 for a bad argument
and 1 for an input that cannot be used; nothing is loaded or exported first."""

from __future__ import annotations

import pytest

from ember.cli import main

CASES = [
    (["generate", "x.ember", "-p", "hi", "-n", "0"], 2, "--max-new-tokens: GenerationConfig.max_new_tokens must be"),
    (["chat", "x.ember", "--top-p", "2"], 2, "--top-p: GenerationConfig.top_p must be in (0, 1]"),
    (["bench", "x.ember", "--warmup", "-1"], 2, "--warmup must be >= 0, got -1"),
    (["export", "/nonexistent-model"], 1, "model source '/nonexistent-model' does not exist"),
    (["inspect", "/nonexistent.ember"], 1, "no such file: '/nonexistent.ember'"),
    (["eval", "/nonexistent.ember"], 1, "no such file: '/nonexistent.ember'"),
    (["serve", "x.ember", "--replicas", "2"], 2, "--replicas 2 needs --ray"),
    (["serve", "x.ember", "--sessions", "0"], 2, "sessions must be an int in [1, 1024], got 0"),
]


@pytest.mark.parametrize(("argv", "status", "message"), CASES, ids=[" ".join(c[0][:1] + c[0][2:]) for c in CASES])
def test_errors_have_one_form(argv: list[str], status: int, message: str, capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == status
    err = capsys.readouterr().err
    assert err.startswith(f"ember {argv[0]}: error: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
