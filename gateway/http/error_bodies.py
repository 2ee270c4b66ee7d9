"""OpenAI-shaped HTTP errors: ``{"error": {"message", "type", "param", "code"}}`` with a status code.

Messages are written for the client: never a stack trace, a path or an object address.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse

from ..realtime.protocol import clean  # one sanitizer for WS and HTTP errors

if TYPE_CHECKING:
    from ..core.services import Services

_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    410: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "invalid_request_error",
}

# things a library message may carry that a client must not see


class ApiError(Exception):
    """A refused request: HTTP ``status``, machine ``code``, one-line ``message``."""

    def __init__(
        self, status: int, code: str, message: str, param: str | None = None, headers: dict[str, str] | None = None
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.code, self.message, self.param)


def error_body(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    kind = _TYPES.get(status, "server_error")
    return {"error": {"message": clean(message), "type": kind, "param": param, "code": code}}


def error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


def check_model(svc: Services, model: str, also: tuple[str, ...] = ()) -> None:
    """404 ``model_not_found`` unless this server answers to ``model`` (``Services.model_refusal``)."""
    refusal = svc.model_refusal(model, also)
    if refusal:
        raise ApiError(404, "model_not_found", refusal, "model")


def busy(message: str = "the server is at capacity; retry shortly") -> ApiError:
    return ApiError(503, "server_busy", message, headers={"Retry-After": "1"})
