"""The words a text-only LLM reads for an image (``processors.vision_text``): labels, reading order, limits."""

from __future__ import annotations

from processors.vision_text import TextBox, VisionReading, describe, label_name, reading_order


def box(x0: float, y0: float, text: str, w: float = 60, h: float = 20, score: float = 0.99) -> TextBox:
    return TextBox(x0, y0, x0 + w, y0 + h, text, score)


def test_an_imagenet_class_gets_its_spelled_out_synonym_or_its_first():
    assert label_name("tabby, tabby cat") == "tabby cat"
    assert label_name("projectile, missile") == "projectile"
    assert label_name("espresso") == "espresso"
    assert label_name("jersey, T-shirt, tee shirt") == "jersey"


def test_boxes_a_detector_split_on_one_row_join_left_to_right_and_rows_go_top_to_bottom():
    boxes = [
        box(200, 92, "4.50"),  # the price of the first item, found before its name
        box(30, 262, "Total"),
        box(30, 30, "Receipt", w=200),
        box(30, 90, "Latte"),
        box(180, 263, "7.75"),
    ]
    assert reading_order(boxes) == ["Receipt", "Latte 4.50", "Total 7.75"]


def test_rows_that_touch_but_do_not_overlap_by_half_stay_apart_and_weak_or_empty_boxes_are_dropped():
    boxes = [box(0, 0, "upper"), box(0, 15, "lower"), box(100, 0, "  ", score=0.99), box(100, 15, "noise", score=0.2)]
    assert reading_order(boxes) == ["upper", "lower"]


def test_the_description_says_the_labels_are_guesses_and_quotes_the_text_lines():
    reading = VisionReading(labels=(("tabby cat", 0.62), ("tiger cat", 0.2), ("lynx", 0.01)), lines=("Hello", "world"))
    text = describe(reading, top_k=3, min_score=0.05)
    assert text.startswith("[image: ") and text.endswith("]")
    assert "classifier's guesses" in text
    assert "tabby cat (62%), tiger cat (20%)" in text and "lynx" not in text  # under min_score
    assert '"""\nHello\nworld\n"""' in text
    assert text.index("Hello") < text.index("tabby cat")  # the text first: a small model quotes what leads


def test_labels_under_the_floor_are_not_guessed_at_and_no_text_is_said_plainly():
    text = describe(VisionReading(labels=(("maze", 0.02),), lines=()), min_score=0.05)
    assert text == "[image: a photo classifier recognised none of its classes in it. No text in it.]"
    text = describe(VisionReading(labels=(("nematode", 0.02),), lines=("Hello",)), min_score=0.05)
    assert "nematode" not in text and "Hello" in text


def test_a_page_of_text_is_cut_to_the_budget_and_marked():
    reading = VisionReading(labels=(("menu", 0.5),), lines=tuple(f"line {i} of a long page" for i in range(500)))
    text = describe(reading, max_text_chars=200)
    quoted = text.split('"""\n', 1)[1].rsplit('\n"""', 1)[0]
    assert len(quoted) <= 201 and quoted.endswith("…")
