"""OpenAI-style API errors: {"error": {"message", "type", "param", "code"}} with an HTTP status."""

from __future__ import annotations

from typing import Any

__all__ = ["APIError", "bad_request"]


class APIError(Exception):
    """An error answered to the client as OpenAI's error JSON (never a traceback)."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)
