"""Pure rules, on a fake clock: ek_ keys (minting, once only, expiry), per-key budgets, what a key locks."""

from __future__ import annotations

import asyncio

import pytest

from gateway.cluster.snapshot import restored, snapshot
from gateway.core.ephemeral_keys import MAX_TTL_S, MIN_TTL_S, Grant, MemoryVault, is_ephemeral, mint, value_hash
from gateway.core.keylimits import KeyLimits
from gateway.realtime import fixed_fields as locks
from gateway.realtime import protocol as p
from gateway.realtime.actions import Output
from gateway.realtime.session import Session, SessionDefaults


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


# ---------------------------------------------------------------- ek_ keys


def test_a_minted_key_is_ek_prefixed_unguessable_and_expires_after_its_ttl():
    value, grant = mint("parent", {"instructions": "hi"}, 60, now=100.0, session_id="sess_1")
    other, _ = mint("parent", {}, 60, now=100.0)
    assert is_ephemeral(value) and value != other and len(value) > 40
    assert grant == Grant("parent", 160.0, {"instructions": "hi"}, "sess_1")
    assert Grant.from_json(grant.to_json()) == grant
    assert not is_ephemeral("sk-real") and not is_ephemeral(None) and not is_ephemeral("")


@pytest.mark.parametrize("ttl", [MIN_TTL_S - 1, MAX_TTL_S + 1, 0, -5])
def test_a_ttl_outside_ga_bounds_is_refused(ttl):
    with pytest.raises(ValueError, match="ttl_s"):
        mint("parent", {}, ttl, now=0.0)


def test_a_key_is_taken_once_then_refused_as_used():
    clock = Clock()
    vault = MemoryVault(clock)
    value, grant = mint("p", {}, 60, clock())
    assert vault.put_now(value, grant, 10)
    assert vault.take_now(value) == grant
    assert vault.take_now(value) == "used"
    assert vault.take_now(value + "x") == "unknown"
    assert vault.take_now("ek_" + "A" * 43) == "unknown"


def test_an_expired_key_is_refused_and_a_key_is_good_until_just_before():
    clock = Clock()
    vault = MemoryVault(clock)
    a, ga = mint("p", {}, 60, clock())
    b, gb = mint("p", {}, 60, clock())
    vault.put_now(a, ga, 10)
    vault.put_now(b, gb, 10)
    clock.t += 59
    assert vault.take_now(a) == ga
    clock.t += 1  # exactly at expires_at: no longer
    assert vault.take_now(b) == "expired"


def test_only_hashes_are_kept():
    clock = Clock()
    vault = MemoryVault(clock)
    value, grant = mint("p", {}, 60, clock())
    vault.put_now(value, grant, 10)
    assert value not in repr(vault.__dict__) and value_hash(value) in vault._waiting


def test_unredeemed_keys_per_parent_are_capped_and_expired_ones_free_their_place():
    clock = Clock()
    vault = MemoryVault(clock)
    minted = [mint("p", {}, 30, clock()) for _ in range(3)]
    assert all(vault.put_now(v, g, 3) for v, g in minted)
    extra = mint("p", {}, 30, clock())
    assert not vault.put_now(*extra, 3)
    assert vault.put_now(*mint("q", {}, 30, clock()), 3)  # another parent is not affected
    assert vault.take_now(minted[0][0]) == minted[0][1]  # a taken one frees its place
    assert vault.put_now(*extra, 3)
    clock.t += 31
    assert vault.outstanding("p") == 0
    assert vault.put_now(*mint("p", {}, 30, clock()), 3)


def test_the_async_face_is_the_same_vault():
    clock = Clock()
    vault = MemoryVault(clock)
    value, grant = mint("p", {}, 60, clock())

    async def main():
        assert await vault.put(value, grant, 1)
        assert await vault.take(value) == grant
        assert await vault.take(value) == "used"

    asyncio.run(main())


# ---------------------------------------------------------------- per-key budgets


def test_requests_are_counted_per_key_and_refused_when_spent_until_the_window_resets():
    clock = Clock(600.0)  # the start of a 60 s window
    limits = KeyLimits(requests=2, tokens=None, window_s=60, clock=clock)
    assert limits.admit("a") is None and limits.admit("a") is None
    clock.t += 10
    spent = limits.admit("a")
    assert spent is not None and spent.name == "requests" and spent.remaining == 0
    assert spent.reset_seconds == pytest.approx(50.0)
    assert "resets in 50 s" in spent.message()
    assert limits.admit("b") is None  # another key has its own
    clock.t += 50  # the next window
    assert limits.admit("a") is None
    assert [f.wire() for f in limits.figures("a")] == [
        {"name": "requests", "limit": 2, "remaining": 1, "reset_seconds": 60.0}
    ]


def test_tokens_are_charged_when_a_response_ends_and_a_spent_budget_refuses_the_next():
    clock = Clock(0.0)
    limits = KeyLimits(requests=None, tokens=100, window_s=60, clock=clock)
    bound = limits.bound("k")
    assert bound.admit() is None
    left = bound.charge(70)
    assert [(f.name, f.limit, f.remaining) for f in left] == [("tokens", 100, 30)]
    assert bound.admit() is None  # 30 left: it may start (and overdraw)
    left = bound.charge(45)
    assert left[0].remaining == 0
    spent = bound.admit()
    assert spent is not None and spent.name == "tokens"


def test_both_limits_are_reported_in_order():
    limits = KeyLimits(requests=5, tokens=1000, window_s=60, clock=Clock(30.0))
    limits.admit("k")
    limits.charge("k", 12)
    assert [(f.name, f.remaining) for f in limits.figures("k")] == [("requests", 4), ("tokens", 988)]
    assert KeyLimits(None, None, 60, Clock()).enabled is False


# ---------------------------------------------------------------- locks


def _update(**session):
    return p.SessionUpdate(type="session.update", session=p.SessionOptions.model_validate(session))


def test_a_session_update_loses_only_its_locked_fields():
    ev = _update(instructions="be evil", temperature=0.7, model="x", tools=[{"type": "function", "name": "f"}])
    kept = locks.unlocked(ev, frozenset({"instructions", "model", "tools"}))
    assert kept.session.model_fields_set == {"temperature"} and kept.session.temperature == 0.7
    assert locks.unlocked(ev, frozenset()) is ev
    plain = _update(temperature=0.3)
    assert locks.unlocked(plain, frozenset({"instructions"})) is plain


def test_a_response_overriding_a_locked_field_is_named():
    ev = p.ResponseCreate(type="response.create", response=p.ResponseOptions(instructions="x", temperature=0.2))
    assert locks.overridden(ev, frozenset({"instructions"})) == "response.instructions"
    assert locks.overridden(ev, frozenset({"tools"})) is None
    assert locks.overridden(p.ResponseCreate(type="response.create"), frozenset({"tools"})) is None


# ---------------------------------------------------------------- a Session with them


def _session() -> tuple[Session, list[dict]]:
    sent: list[dict] = []

    def stamp(ev: dict) -> dict:
        sent.append(ev)
        return ev

    return Session(SessionDefaults(model="m", aliases=("alias",), max_output_tokens=64), stamp), sent


def _locked(session: Session, **fixed) -> None:
    """What keyed.bind does for an ek_ key's config (without the audio checks)."""
    ev = _update(**fixed)
    merged = session.merged(ev)
    assert not isinstance(merged, Output)
    session.options = merged
    session.locked = frozenset({*ev.session.model_fields_set, "model"})


def test_a_locked_session_keeps_its_fixed_fields_through_updates_and_a_snapshot():
    s, sent = _session()
    _locked(s, instructions="fixed", max_output_tokens=10)
    out = s.handle(_update(instructions="other", model="alias", temperature=0.9, max_output_tokens=64))
    view = out.events[0]["session"]
    assert out.events[0]["type"] == "session.updated"
    assert (view["instructions"], view["model"], view["max_output_tokens"], view["temperature"]) == (
        "fixed",
        "m",
        10,
        0.9,
    )
    moved, _ = _session()  # another replica taking it over
    moved.handle(restored(snapshot(s, 0, 0)))
    assert moved.locked == s.locked
    out = moved.handle(_update(instructions="other"))
    assert out.events[0]["session"]["instructions"] == "fixed"


def test_a_response_may_not_override_what_the_key_fixed_but_may_set_the_rest():
    s, _ = _session()
    _locked(s, instructions="fixed", tools=[])
    out = s.handle(p.ResponseCreate(type="response.create", response=p.ResponseOptions(instructions="x")))
    assert out.events[0]["error"]["code"] == "session_field_locked"
    assert out.events[0]["error"]["param"] == "response.instructions" and s.response is None
    out = s.handle(p.ResponseCreate(type="response.create", response=p.ResponseOptions(temperature=0.3)))
    assert out.events[0]["type"] == "response.created"


def test_rate_limits_updated_follows_response_done_and_a_spent_budget_refuses():
    s, _ = _session()
    s.limiter = KeyLimits(requests=2, tokens=50, window_s=60, clock=Clock(0.0)).bound("k")
    for expected_requests, expected_tokens in ((1, 30), (0, 10)):
        rid = s.handle(p.ResponseCreate(type="response.create")).events[0]["response"]["id"]
        events = s.on_done(rid, "stop", {}, {"total_tokens": 20}).events
        assert [e["type"] for e in events][-2:] == ["response.done", "rate_limits.updated"]
        assert [(x["name"], x["remaining"]) for x in events[-1]["rate_limits"]] == [
            ("requests", expected_requests),
            ("tokens", expected_tokens),
        ]
    out = s.handle(p.ResponseCreate(type="response.create", event_id="e3"))
    assert out.events[0]["error"]["code"] == "rate_limit_exceeded" and out.events[0]["error"]["event_id"] == "e3"
    assert s.response is None


def test_no_limiter_no_rate_limits_event():
    s, _ = _session()
    rid = s.handle(p.ResponseCreate(type="response.create")).events[0]["response"]["id"]
    assert "rate_limits.updated" not in [e["type"] for e in s.on_done(rid, "stop", {}, {"total_tokens": 5}).events]
