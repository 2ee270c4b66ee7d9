"""``/v1/files``: upload once, refer to the file by id instead of resending base64 (OpenAI's Files API).

``POST /v1/files`` (multipart: ``file``, ``purpose`` = ``vision`` | ``user_data``) checks the file
as inline data is checked (``gateway.core.uploads``) and keeps it for ``files.expiry_s``;
``GET /v1/files``, ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``, ``DELETE /v1/files/{id}``.
Files belong to the API key that uploaded them: for any other key they do not exist (404).
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..core.file_store import PURPOSES, FileStore, QuotaExceeded, StoredFile, TooManyFiles
from ..core.services import Services
from ..core.uploads import REFUSALS, check_upload, sniff
from .error_bodies import ApiError
from .schemas import header_count

FORM_OVERHEAD = 64 * 1024  # multipart boundaries and the small fields around the file
MAX_FILENAME = 255  # characters of a filename kept (a longer one is cut, as file systems would)


def _why(exc: Exception) -> str:
    detail = getattr(exc, "detail", None) or getattr(exc, "message", None) or ""
    return str(detail)[:200] or "malformed"


def _store(svc: Services) -> FileStore:
    if svc.files is None:
        raise ApiError(404, "files_disabled", "file uploads are not enabled on this server (config: files.enabled)")
    return svc.files


async def upload(svc: Services, request: Request, owner: str) -> Response:
    store = _store(svc)
    limit = svc.config.files.max_file_bytes
    declared = request.headers.get("content-length")
    if declared is not None:
        count = header_count(declared)
        if count is None:
            raise ApiError(400, "invalid_request", "Content-Length is not a number", "Content-Length")
        if count > limit + FORM_OVERHEAD:
            raise ApiError(413, "file_too_large", f"the file exceeds the limit of {limit} bytes (files.max_file_bytes)")
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ApiError(400, "invalid_request", "upload a file as multipart/form-data with fields 'file' and 'purpose'")
    try:
        form = await request.form(max_files=1, max_fields=8, max_part_size=limit + FORM_OVERHEAD)
    except (HTTPException, MultiPartException) as exc:  # too many fields, a part too big, a bad boundary
        raise ApiError(400, "invalid_multipart", f"the multipart body cannot be read: {_why(exc)}") from None
    except (ValueError, LookupError, AssertionError):  # what python-multipart raises on a body it cannot parse
        raise ApiError(400, "invalid_multipart", "the multipart body cannot be read") from None
    try:
        purpose, part = form.get("purpose"), form.get("file")
        if not isinstance(purpose, str) or purpose not in PURPOSES:
            raise ApiError(400, "invalid_value", f"purpose must be one of {', '.join(PURPOSES)}", "purpose")
        if not isinstance(part, UploadFile):
            raise ApiError(400, "missing_required_parameter", "the form has no 'file' part", "file")
        data = await part.read(limit + 1)
        if len(data) > limit:
            raise ApiError(413, "file_too_large", f"the file exceeds the limit of {limit} bytes (files.max_file_bytes)")
        filename, declared_type = (part.filename or "upload")[:MAX_FILENAME], part.content_type
    finally:
        await form.close()
    try:
        kind, mime = await asyncio.to_thread(check_upload, svc, data, purpose, declared_type)
    except REFUSALS as exc:
        raise ApiError(400, exc.code, exc.message, "file") from None
    try:
        meta = await asyncio.to_thread(store.put, owner, data, filename, purpose, kind, mime)
    except QuotaExceeded as exc:
        raise ApiError(413, "file_quota_exceeded", exc.message + " (files.quota_bytes_per_key)", "file") from None
    except TooManyFiles as exc:
        raise ApiError(429, "too_many_files", exc.message + " (files.max_per_key)", "file") from None
    return JSONResponse(meta.openai())


MAX_LIST = 10_000  # files in one page of GET /v1/files (OpenAI's bound)


async def listing(svc: Services, request: Request, owner: str) -> Response:
    """OpenAI's page: ``after`` (a file id), ``limit`` (1..10000), ``order`` (asc: upload order, or desc),
    ``purpose``; ``{object: list, data, first_id, last_id, has_more}``."""
    q = request.query_params
    raw_limit = q.get("limit", str(MAX_LIST))
    if not (raw_limit.isascii() and raw_limit.isdigit() and 1 <= int(raw_limit) <= MAX_LIST):
        raise ApiError(400, "invalid_value", f"limit must be an integer from 1 to {MAX_LIST}", "limit")
    order = q.get("order", "asc")
    if order not in ("asc", "desc"):
        raise ApiError(400, "invalid_value", "order must be asc or desc", "order")
    files = await asyncio.to_thread(_store(svc).list, owner)
    purpose = q.get("purpose")
    chosen = [f for f in files if purpose is None or f.purpose == purpose]
    if order == "desc":
        chosen.reverse()
    after = q.get("after")
    if after is not None:
        ids = [f.id for f in chosen]
        if after not in ids:
            raise ApiError(404, "file_not_found", f"no file {after!r} to list after", "after")
        chosen = chosen[ids.index(after) + 1 :]
    page = chosen[: int(raw_limit)]
    return JSONResponse(
        {
            "object": "list",
            "data": [f.openai() for f in page],
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
            "has_more": len(chosen) > len(page),
        }
    )


async def _found(svc: Services, request: Request, owner: str) -> StoredFile:
    fid = request.path_params["file_id"]
    meta = await asyncio.to_thread(_store(svc).get, owner, fid)
    if meta is None:
        raise ApiError(404, "file_not_found", f"no file {fid!r}: it was deleted, expired or never existed", "file_id")
    return meta


async def retrieve(svc: Services, request: Request, owner: str) -> Response:
    return JSONResponse((await _found(svc, request, owner)).openai())


async def content(svc: Services, request: Request, owner: str) -> Response:
    meta = await _found(svc, request, owner)
    found = await asyncio.to_thread(_store(svc).read, owner, meta.id)
    if found is None:  # deleted in between
        raise ApiError(404, "file_not_found", f"no file {meta.id!r}: it was deleted, expired or never existed")
    data = found[1]
    # served as a download, never as a page of this origin: only a type its bytes prove (an image or
    # WAV the upload check decoded) is named; anything else, whatever the uploader declared, is octet-stream
    proven = sniff(data)
    mime = proven if proven is not None and proven == meta.mime and meta.kind in ("image", "audio") else None
    return Response(data, media_type=mime or "application/octet-stream", headers=download_headers(meta.filename))


def download_headers(filename: str) -> dict[str, str]:
    """Headers that make a browser save the content instead of rendering it, in a sandbox if it tries."""
    ascii_name = "".join(c if c.isascii() and c.isprintable() and c not in '"\\;' else "_" for c in filename)[:200]
    disposition = f"attachment; filename=\"{ascii_name or 'file'}\"; filename*=UTF-8''{quote(filename[:200])}"
    return {
        "Content-Disposition": disposition,
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
    }


async def delete(svc: Services, request: Request, owner: str) -> Response:
    meta = await _found(svc, request, owner)
    await asyncio.to_thread(_store(svc).delete, owner, meta.id)
    return JSONResponse({"id": meta.id, "object": "file", "deleted": True})
