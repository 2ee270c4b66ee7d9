"""Uploaded files (``/v1/files``): bytes on disk under a configured folder, one folder per API key.

Each file is ``<folder>/<owner>/<id>.bin`` with its metadata beside it in ``<id>.json``; the owner
is the digest of the uploader's API key (``gateway.security.key_digest``), so another key neither
lists nor reads it: to it the id does not exist. Stored bytes per owner are bounded by a quota;
every file expires ``expiry_s`` after its upload (swept on each upload and ignored once past).

Blocking file I/O: the HTTP layer calls this through ``asyncio.to_thread``.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PURPOSES = ("vision", "user_data")  # what this server accepts (OpenAI's names)


class QuotaExceeded(Exception):
    def __init__(self, used: int, size: int, quota: int):
        super().__init__(f"this file ({size} bytes) would exceed the key's file quota of {quota} bytes ({used} used)")
        self.message = str(self)


@dataclass(frozen=True)
class StoredFile:
    id: str  # "file-…"
    owner: str  # key digest of the uploader
    bytes: int
    created_at: int  # unix seconds
    expires_at: int  # unix seconds
    filename: str
    purpose: str  # vision | user_data
    kind: str  # image | audio | data: what the upload check found it to be
    mime: str  # image/png …, audio/wav, or the declared type of other data
    uploaded: float = 0.0  # exact upload time: the order of files uploaded within one second

    def openai(self) -> dict[str, Any]:
        """OpenAI's ``file`` object."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


class FileStore:
    def __init__(self, folder: Path, quota_bytes: int, expiry_s: float, clock: Callable[[], float] = time.time):
        self.folder = folder
        self.quota_bytes = quota_bytes
        self.expiry_s = expiry_s
        self.clock = clock
        self._lock = threading.Lock()  # quota check + write are one step (uploads run in threads)

    def _dir(self, owner: str) -> Path:
        return self.folder / (owner or "anonymous")

    def put(self, owner: str, data: bytes, filename: str, purpose: str, kind: str, mime: str) -> StoredFile:
        with self._lock:
            self.sweep()
            used = sum(f.bytes for f in self.list(owner))
            if used + len(data) > self.quota_bytes:
                raise QuotaExceeded(used, len(data), self.quota_bytes)
            now = self.clock()
            meta = StoredFile(
                id=f"file-{secrets.token_hex(12)}",
                owner=owner,
                bytes=len(data),
                created_at=int(now),
                expires_at=int(now + self.expiry_s),
                filename=filename,
                purpose=purpose,
                kind=kind,
                mime=mime,
                uploaded=now,
            )
            d = self._dir(owner)
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{meta.id}.bin").write_bytes(data)
            (d / f"{meta.id}.json").write_text(json.dumps(asdict(meta)))  # last: a file without it is not listed
            return meta

    def get(self, owner: str, file_id: str) -> StoredFile | None:
        """The file's metadata, or None when it does not exist for this owner (or expired)."""
        if not file_id.startswith("file-") or not file_id[5:].isalnum():  # never a path
            return None
        try:
            meta = StoredFile(**json.loads((self._dir(owner) / f"{file_id}.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None
        return meta if meta.expires_at > self.clock() and meta.owner == owner else None

    def read(self, owner: str, file_id: str) -> tuple[StoredFile, bytes] | None:
        meta = self.get(owner, file_id)
        if meta is None:
            return None
        try:
            return meta, (self._dir(owner) / f"{file_id}.bin").read_bytes()
        except OSError:
            return None

    def list(self, owner: str) -> list[StoredFile]:
        d = self._dir(owner)
        if not d.is_dir():
            return []
        found = (self.get(owner, p.stem) for p in sorted(d.glob("file-*.json")))
        return sorted((f for f in found if f is not None), key=lambda f: (f.uploaded, f.id))

    def delete(self, owner: str, file_id: str) -> bool:
        if self.get(owner, file_id) is None:
            return False
        d = self._dir(owner)
        (d / f"{file_id}.json").unlink(missing_ok=True)
        (d / f"{file_id}.bin").unlink(missing_ok=True)
        return True

    def sweep(self) -> int:
        """Remove every expired file (any owner); how many."""
        now, gone = self.clock(), 0
        for meta_path in self.folder.glob("*/file-*.json"):
            try:
                expires = json.loads(meta_path.read_text())["expires_at"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if expires <= now:
                meta_path.unlink(missing_ok=True)
                meta_path.with_suffix(".bin").unlink(missing_ok=True)
                gone += 1
        return gone
