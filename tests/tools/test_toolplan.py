"""``models.toolplan``: the one tool planner both APIs use, tested on its own (no server, no API types)."""

from __future__ import annotations

import pytest

from models.toolplan import NO_PARAMETERS, Declared, ToolPlanError, check, check_budget, choose

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def declared(*names: str, path: str = "tools[{}].function") -> list[Declared]:
    return [Declared(n, f"{n} tool", WEATHER, path.format(i)) for i, n in enumerate(names)]


def test_declarations_become_tools_and_a_missing_schema_takes_no_arguments():
    tools = check([*declared("weather"), Declared("ping", "", None, "tools[1].function")])
    assert [(t.name, t.parameters) for t in tools] == [("weather", WEATHER), ("ping", NO_PARAMETERS)]


@pytest.mark.parametrize("path", ["tools[{}].function", "session.tools[{}]"])
def test_errors_name_the_field_in_the_path_each_api_gives(path):
    with pytest.raises(ToolPlanError) as dup:
        check(declared("a", "a", path=path))
    assert dup.value.param == path.format(1) + ".name" and "two tools are named 'a'" in dup.value.message
    bad = Declared("x", "", {"type": "object", "properties": {"n": {"type": "no-such-type"}}}, path.format(0))
    with pytest.raises(ToolPlanError) as schema:
        check([bad])
    assert schema.value.param == path.format(0) + ".parameters"


def test_the_budget_names_the_schema_past_it():
    deep: dict = {"type": "string"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    with pytest.raises(ToolPlanError) as info:
        check_budget([Declared("d", "", {"type": "object", "properties": {"x": deep}}, "session.tools[0]")], "tools")
    assert info.value.param.startswith("session.tools[0].parameters")


def test_choices_auto_none_named_and_required():
    tools = check(declared("weather", "time"))
    auto = choose(tools, "auto", None, "tool_choice", parallel=True, forced_parallel=True)
    assert auto.tools == tools and auto.known == {"weather", "time"} and auto.grammar is None
    none = choose(tools, "none", None, "tool_choice", parallel=True, forced_parallel=True)
    assert none.tools == [] and none.known == frozenset() and none.grammar is None
    named = choose(tools, "auto", "time", "tool_choice", parallel=True, forced_parallel=True)
    assert named.grammar is not None and named.parallel is False and "time" in named.grammar
    one = choose(tools, "required", None, "session.tool_choice", parallel=True, forced_parallel=False)
    many = choose(tools, "required", None, "tool_choice", parallel=True, forced_parallel=True)
    assert one.grammar != many.grammar and (one.parallel, many.parallel) == (False, True)


def test_a_choice_that_cannot_be_met_names_the_choice_field():
    with pytest.raises(ToolPlanError) as unknown:
        choose(check(declared("weather")), "auto", "nope", "response.tool_choice", True, False)
    assert unknown.value.param == "response.tool_choice" and "'nope'" in unknown.value.message
    with pytest.raises(ToolPlanError) as empty:
        choose([], "required", None, "tool_choice", True, True)
    assert empty.value.param == "tool_choice"
