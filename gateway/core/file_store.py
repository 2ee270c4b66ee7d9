"""Uploaded files (``/v1/files``): bytes on disk under a configured folder, one folder per API key.

Each file is ``<folder>/<owner>/<id>.bin`` with its metadata beside it in ``<id>.json``; the owner
is the digest of the uploader's API key (``gateway.core.security.key_digest``), so another key neither
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


class TooManyFiles(Exception):
    def __init__(self, limit: int):
        super().__init__(f"this key already has {limit} files, the most it may keep; delete some first")
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


class _KeyFiles:
    """One key's files, in upload order, and the bytes they hold; its lock makes check + write one step."""

    def __init__(self, files: dict[str, StoredFile]):
        self.lock = threading.Lock()
        self.files = files
        self.used = sum(f.bytes for f in files.values())


class FileStore:
    """Per key: an index of its files' metadata, read from its folder once, then kept current (no
    upload reads another key's files, nor waits for another key's upload). Expired files of the
    uploading key are removed on each of its uploads; every key's at most every ``sweep_every_s``."""

    def __init__(
        self,
        folder: Path,
        quota_bytes: int,
        expiry_s: float,
        clock: Callable[[], float] = time.time,
        max_per_key: int = 1000,
        sweep_every_s: float = 600.0,
    ):
        self.folder = folder
        self.quota_bytes = quota_bytes
        self.expiry_s = expiry_s
        self.clock = clock
        self.max_per_key = max_per_key
        self.sweep_every_s = sweep_every_s
        self._owners: dict[str, _KeyFiles] = {}
        self._owners_lock = threading.Lock()  # only around the dict itself: O(1) under it
        self._last_sweep = clock()

    def _dir(self, owner: str) -> Path:
        return self.folder / (owner or "anonymous")

    def _owner(self, owner: str) -> _KeyFiles:
        with self._owners_lock:
            found = self._owners.get(owner)
        if found is not None:
            return found
        d = self._dir(owner)
        files = {}
        for meta_path in sorted(d.glob("file-*.json")) if d.is_dir() else []:
            meta = self._read_meta(owner, meta_path.stem)
            if meta is not None:
                files[meta.id] = meta
        loaded = _KeyFiles(dict(sorted(files.items(), key=lambda kv: (kv[1].uploaded, kv[0]))))
        with self._owners_lock:
            return self._owners.setdefault(owner, loaded)

    def _read_meta(self, owner: str, file_id: str) -> StoredFile | None:
        try:
            meta = StoredFile(**json.loads((self._dir(owner) / f"{file_id}.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None
        return meta if meta.owner == owner and meta.id == file_id else None

    def put(self, owner: str, data: bytes, filename: str, purpose: str, kind: str, mime: str) -> StoredFile:
        if self.clock() - self._last_sweep >= self.sweep_every_s:
            self.sweep()
        o = self._owner(owner)
        with o.lock:
            self._expire(owner, o)
            if len(o.files) >= self.max_per_key:
                raise TooManyFiles(self.max_per_key)
            if o.used + len(data) > self.quota_bytes:
                raise QuotaExceeded(o.used, len(data), self.quota_bytes)
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
            o.files[meta.id] = meta
            o.used += meta.bytes
            return meta

    def _expire(self, owner: str, o: _KeyFiles) -> None:
        """Drop ``owner``'s expired files (``o.lock`` held)."""
        now = self.clock()
        for meta in [f for f in o.files.values() if f.expires_at <= now]:
            self._remove(owner, o, meta.id)

    def _remove(self, owner: str, o: _KeyFiles, file_id: str) -> None:
        meta = o.files.pop(file_id, None)
        if meta is not None:
            o.used -= meta.bytes
        d = self._dir(owner)
        (d / f"{file_id}.json").unlink(missing_ok=True)
        (d / f"{file_id}.bin").unlink(missing_ok=True)

    def get(self, owner: str, file_id: str) -> StoredFile | None:
        """The file's metadata, or None when it does not exist for this owner (or expired)."""
        if not file_id.startswith("file-") or not file_id[5:].isalnum():  # never a path
            return None
        meta = self._owner(owner).files.get(file_id)
        return meta if meta is not None and meta.expires_at > self.clock() else None

    def read(self, owner: str, file_id: str) -> tuple[StoredFile, bytes] | None:
        meta = self.get(owner, file_id)
        if meta is None:
            return None
        try:
            return meta, (self._dir(owner) / f"{file_id}.bin").read_bytes()
        except OSError:
            return None

    def list(self, owner: str) -> list[StoredFile]:
        """``owner``'s live files in upload order."""
        o = self._owner(owner)
        now = self.clock()
        with o.lock:
            return [f for f in o.files.values() if f.expires_at > now]

    def delete(self, owner: str, file_id: str) -> bool:
        if self.get(owner, file_id) is None:
            return False
        o = self._owner(owner)
        with o.lock:
            self._remove(owner, o, file_id)
        return True

    def sweep(self) -> int:
        """Remove every expired file (any owner); how many."""
        self._last_sweep = self.clock()
        gone = 0
        owners = [p.name for p in self.folder.iterdir() if p.is_dir()] if self.folder.is_dir() else []
        for name in owners:
            owner = "" if name == "anonymous" else name
            o = self._owner(owner)
            with o.lock:
                before = len(o.files)
                self._expire(owner, o)
                gone += before - len(o.files)
        return gone
