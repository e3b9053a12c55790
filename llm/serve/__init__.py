"""ember.llm.serve: an OpenAI-compatible HTTP server over a pool of sessions of one model.

    ember serve smol.ember --sessions 2 --port 8000

or from Python (the ASGI app runs under any ASGI server):

    from ember.llm.serve import ServeConfig, create_app
    app = create_app(ServeConfig(path="smol.ember", sessions=2))

Needs the optional ``serve`` extra (``pip install "ember[serve]"``: Starlette and uvicorn);
importing this package does not import them.
"""

from __future__ import annotations

from ember._lazy import lazy_attributes

__all__ = ["ServeConfig", "create_app"]

__getattr__ = lazy_attributes(
    __name__, {"ServeConfig": f"{__name__}.config", "create_app": f"{__name__}.app"}
)
