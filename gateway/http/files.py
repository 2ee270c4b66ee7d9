"""``/v1/files``: upload once, refer to the file by id instead of resending base64 (OpenAI's Files API).

``POST /v1/files`` (multipart: ``file``, ``purpose`` = ``vision`` | ``user_data``) checks the file
as inline data is checked (``gateway.uploads``) and keeps it for ``files.expiry_s``;
``GET /v1/files``, ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``, ``DELETE /v1/files/{id}``.
Files belong to the API key that uploaded them: for any other key they do not exist (404).
"""

from __future__ import annotations

import asyncio

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..files import PURPOSES, FileStore, QuotaExceeded, StoredFile
from ..services import Services
from ..uploads import REFUSALS, check_upload
from .errors import ApiError

FORM_OVERHEAD = 64 * 1024  # multipart boundaries and the small fields around the file


def _store(svc: Services) -> FileStore:
    if svc.files is None:
        raise ApiError(404, "files_disabled", "file uploads are not enabled on this server (config: files.enabled)")
    return svc.files


async def upload(svc: Services, request: Request, owner: str) -> Response:
    store = _store(svc)
    limit = svc.config.files.max_file_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit + FORM_OVERHEAD:
        raise ApiError(413, "file_too_large", f"the file exceeds the limit of {limit} bytes (files.max_file_bytes)")
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ApiError(400, "invalid_request", "upload a file as multipart/form-data with fields 'file' and 'purpose'")
    async with request.form(max_files=1, max_fields=8, max_part_size=limit + FORM_OVERHEAD) as form:
        purpose, part = form.get("purpose"), form.get("file")
        if not isinstance(purpose, str) or purpose not in PURPOSES:
            raise ApiError(400, "invalid_value", f"purpose must be one of {', '.join(PURPOSES)}", "purpose")
        if not isinstance(part, UploadFile):
            raise ApiError(400, "missing_required_parameter", "the form has no 'file' part", "file")
        data = await part.read(limit + 1)
        if len(data) > limit:
            raise ApiError(413, "file_too_large", f"the file exceeds the limit of {limit} bytes (files.max_file_bytes)")
        filename, declared_type = part.filename or "upload", part.content_type
    try:
        kind, mime = await asyncio.to_thread(check_upload, svc, data, purpose, declared_type)
    except REFUSALS as exc:
        raise ApiError(400, exc.code, exc.message, "file") from None
    try:
        meta = await asyncio.to_thread(store.put, owner, data, filename, purpose, kind, mime)
    except QuotaExceeded as exc:
        raise ApiError(413, "file_quota_exceeded", exc.message + " (files.quota_bytes_per_key)", "file") from None
    return JSONResponse(meta.openai())


async def listing(svc: Services, request: Request, owner: str) -> Response:
    files = await asyncio.to_thread(_store(svc).list, owner)
    purpose = request.query_params.get("purpose")
    data = [f.openai() for f in files if purpose is None or f.purpose == purpose]
    return JSONResponse({"object": "list", "data": data, "has_more": False})


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
    return Response(found[1], media_type=meta.mime)


async def delete(svc: Services, request: Request, owner: str) -> Response:
    meta = await _found(svc, request, owner)
    await asyncio.to_thread(_store(svc).delete, owner, meta.id)
    return JSONResponse({"id": meta.id, "object": "file", "deleted": True})
