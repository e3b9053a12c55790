from __future__ import annotations

import pytest

from .tiny_llm import tiny_llm_path


@pytest.fixture(scope="session")
def tiny_path():
    return tiny_llm_path()
