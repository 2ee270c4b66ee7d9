"""The import graph by layer (tests/importgraph.py): no cycle anywhere, and no new import back up a layer."""

from __future__ import annotations

from tests.importgraph import LAYERS, back_up, edges, layer_of, summary
from tests.test_layering import _cycles

KNOWN_BACK_UP: set[tuple[str, str]] = set()  # none: every import points down or across its own layer


def test_no_import_cycle_in_any_package():
    assert _cycles(edges()) == [], summary()


def test_every_module_has_a_layer():
    assert [m for m in edges() if layer_of(m) < 0] == []


def test_no_new_import_runs_back_up_a_layer():
    up = set(back_up())
    new = sorted(up - KNOWN_BACK_UP)
    assert not new, (
        f"imports from a lower layer into a higher one: {new}. Invert the dependency (pass the higher "
        "object in), or, for a new module that belongs lower, add it to its layer in tests/importgraph.py LAYERS.\n"
        + summary()
    )
    gone = sorted(KNOWN_BACK_UP - up)
    assert not gone, f"these no longer run back up: remove them from KNOWN_BACK_UP: {gone}"


def test_the_layer_reader_places_modules_by_their_most_specific_prefix():
    names = [n for n, _ in LAYERS]
    assert names[layer_of("gateway.core.config")] == "gateway core"
    assert names[layer_of("gateway.realtime.session")] == "gateway.realtime"
    assert names[layer_of("gateway.wiring.app")] == "wiring"
    assert names[layer_of("models.engine")] == "models"
    assert back_up({"models.x": {"gateway.wiring.app"}, "gateway.wiring.app": {"models.x"}}) == [
        ("models.x", "gateway.wiring.app")
    ]
