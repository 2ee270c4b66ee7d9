"""Where each word of a synthesis ends (``processors.speech.word_ends``), on made-up phoneme timelines:
the words espeak joins or splits still end where they are said, never on a neighbour's end."""

from __future__ import annotations

from processors.speech import word_ends


def timeline(*groups: str, step: float = 10.0) -> list[tuple[str, float]]:
    """Phoneme groups, one phoneme per letter, each ``step`` samples long, a 5-sample space between groups."""
    out: list[tuple[str, float]] = []
    t = 0.0
    for g in groups:
        for ph in g:
            t += step
            out.append((ph, t))
        t += 5.0
        out.append((" ", t))
    return out


def test_one_group_per_word_ends_each_word_on_its_last_phoneme() -> None:
    tl = timeline("abc", "de", "fghi")
    assert word_ends([3, 2, 4], tl, 1000) == (30, 55, 100)


def test_words_joined_in_one_group_share_it_and_later_words_keep_their_own_ends() -> None:
    # "there was a dragon": espeak says "there was" as one group of 7 phonemes
    tl = timeline("ðɛɹwʌzz", "ɐ", "dɹæɡən")
    ends = word_ends([4, 3, 1, 6], tl, 1000)
    assert ends[0] == 40  # "there": its 4 phonemes of the joined group
    assert ends[1] == 70  # "was": the joined group's end
    assert ends[2] == 85  # "a": its own group, not "dragon"'s
    assert ends[3] == 150


def test_a_word_split_in_two_groups_ends_with_the_second() -> None:
    tl = timeline("ab", "twɛnti", "fɔɹ", "cd")
    assert word_ends([2, 9, 2], tl, 1000) == (20, 120, 145)


def test_a_trailing_space_or_pause_adds_no_word() -> None:
    tl = timeline("ab", "cd,")  # a comma, then the sentence's end
    tl.append((" ", 200.0))
    assert word_ends([2, 3], tl, 1000) == (20, 55)


def test_ends_never_pass_the_audio_and_never_go_back() -> None:
    tl = timeline("abcdef", "g", "hijklmn", "o")
    ends = word_ends([1, 1, 1, 1, 1, 1, 1], tl, 90)
    assert len(ends) == 7
    assert list(ends) == sorted(ends) and max(ends) <= 90


def test_no_words_or_no_phonemes() -> None:
    assert word_ends([], timeline("ab"), 100) == ()
    assert word_ends([2, 2], [], 100) == (100, 100)
