"""processors.turn_text: semantic_vad's end-of-utterance signal and LocalAgreement-2 (pure strings)."""

from __future__ import annotations

import pytest

from processors.turn_text import LocalAgreement, end_of_utterance, semantic_silence_ms


@pytest.mark.parametrize(
    ("text", "ending"),
    [
        ("Please open the kitchen window.", "finished"),
        ("What time is it?", "finished"),
        ("Please open the kitchen window and", "continuing"),
        ("Please open the kitchen window and...", "continuing"),
        ("I want, um", "continuing"),
        ("My favorite color is", "continuing"),
        ("Turn on the lights,", "continuing"),
        ("Turn on the lights", "unknown"),
        ("", "unknown"),
    ],
)
def test_end_of_utterance(text: str, ending: str):
    assert end_of_utterance(text) == ending


def test_finished_sentence_ends_sooner_and_trailing_and_waits_longer():
    for eagerness in ("low", "medium", "high", "auto"):
        done = semantic_silence_ms(eagerness, "Open the window.")
        plain = semantic_silence_ms(eagerness, "Open the window")
        more = semantic_silence_ms(eagerness, "Open the window and")
        assert done < plain < more
    assert semantic_silence_ms("high", "Open the window and") < semantic_silence_ms("low", "Open the window and")


def test_agreement_shows_words_two_passes_agree_on():
    la = LocalAgreement()
    assert la.update("Leave a comment below.") == ""  # the first pass alone shows nothing
    assert la.update("Please open the kit.") == ""  # disagrees from the first word
    assert la.update("Please open the kitchen window") == "Please open the"
    assert la.update("Please open the kitchen window and") == " kitchen window"
    assert la.text == "Please open the kitchen window"


def test_agreement_ignores_case_and_punctuation_when_comparing():
    la = LocalAgreement()
    la.update("please open the")
    assert la.update("Please, open the door") == "Please, open the"


def test_a_pass_that_contradicts_shown_words_adds_nothing():
    la = LocalAgreement()
    la.update("Please open the")
    la.update("Please open the window")
    assert la.update("Leave open the door now") == ""
    assert la.update("Please open the window now") == ""  # after the shown words, "window" differs from "door"
    assert la.update("Please open the window now.") == " window now."


def test_remainder_completes_shown_words_into_the_final_transcript():
    la = LocalAgreement()
    la.update("Please open the kitchen")
    la.update("Please open the kitchen window")
    assert la.text == "Please open the kitchen"
    assert la.text + la.remainder("Please open the kitchen window.") == "Please open the kitchen window."
    assert la.remainder("Leave open the kitchen window.") is None
    fresh = LocalAgreement()
    assert fresh.remainder(" Hello there. ") == "Hello there."
