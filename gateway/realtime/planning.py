"""What generation a ``response.create`` asks for: its messages (the context fitted to the model), sampling,
scheduler options and tools. Pure: functions of the ``Session`` they are given."""

from __future__ import annotations

from typing import Any, Protocol

from models import toolcalls
from models.toolplan import ToolPlan

from ..core.request_options import sampling_params, scheduler_config
from ..tools.state import McpState
from . import functions, truncation
from . import protocol as p
from .actions import Output, StartResponse
from .conversation import Item, ItemError


class PlanningHost(Protocol):
    """What planning reads (and, fitting the context, changes) of the ``Session``."""

    defaults: Any  # its SessionDefaults
    options: p.SessionOptions
    mcp: McpState
    dropped: set[str]  # items truncated out of the model's context
    token_counts: dict[str, tuple[str, int]]  # item id → (its text, its tokens)

    @property
    def items(self) -> list[Item]: ...

    def error(self, code: str, message: str, event_id: str | None = None, param: str | None = None) -> Output: ...

    def context_of(self, items: list[p.InputItem], system: str | None, max_items: int) -> list[dict[str, Any]]: ...

    def messages(self, extra_instructions: str | None = None) -> list[dict[str, str]]: ...


def fit(s: PlanningHost, instructions: str | None, tools: ToolPlan, reply_budget: int) -> None:
    """Drop the oldest whole turns from the model's context when the next prompt would not fit."""
    count = s.defaults.count_tokens
    if count is None or not s.defaults.max_context:
        return

    def tokens(item: dict[str, Any]) -> int:
        text = truncation.item_text(item)
        cached = s.token_counts.get(item["id"])
        if cached is None or cached[0] != text:
            cached = s.token_counts[item["id"]] = (text, count(text))
        return cached[1]

    system = instructions if instructions is not None else s.options.instructions
    fixed = count(system or "") + (count(toolcalls.system_block(tools.tools)) if tools.tools else 0)
    fixed += sum(tokens(i) + truncation.MESSAGE_OVERHEAD for i in s.items if i.get("role") == "system")
    groups = truncation.turns(s.items, s.dropped)
    policy = truncation.Policy.of(s.options.truncation)
    cut = truncation.to_drop(
        groups, tokens, fixed, s.defaults.max_context, reply_budget, policy, s.defaults.context_tokens
    )
    s.dropped.update(cut)
    for item_id in cut:
        s.token_counts.pop(item_id, None)


def plan(
    s: PlanningHost, ev: p.ResponseCreate, rid: str, extra: list[dict[str, str]]
) -> tuple[StartResponse, Any] | Output:
    """The generation ``ev`` asks for (messages, sampling, scheduler), or the error it gets."""
    opts = ev.response or p.ResponseOptions()
    o = s.options

    def pick(name: str) -> Any:
        v = getattr(opts, name)
        return v if v is not None else getattr(o, name)

    max_out = pick("max_output_tokens")
    cap = s.defaults.max_output_tokens
    max_tokens = cap if max_out in (None, "inf") else min(int(max_out), cap)
    if max_tokens < 1:
        return s.error("invalid_value", "max_output_tokens must be ≥ 1", ev.event_id, "max_output_tokens")
    modalities = list(pick("output_modalities") or ["text"])
    if "audio" in modalities:  # spoken with its transcript, or as text where no voice is loaded
        modalities = ["audio"] if s.defaults.speech is not None else ["text"]
    try:
        # the model's tool-call markup never reaches the text: a reply prepared unseen is planned here too
        layers = (s.defaults.scheduler, o.scheduler, opts.scheduler)
        sched = scheduler_config(*layers, spoken=modalities == ["audio"], tool_intercept=toolcalls.TOOL_TAGS)
    except ValueError as exc:  # values the schema could not rule out (the session's or the response's)
        return s.error("invalid_value", str(exc), ev.event_id)
    where = "response" if opts.tools is not None or opts.tool_choice is not None else "session"
    try:
        parallel = pick("parallel_tool_calls") is not False
        tools, s.mcp.last_routes = s.mcp.plan(pick("tools"), pick("tool_choice"), where, parallel)
    except functions.ToolError as exc:
        return s.error("invalid_value", exc.message, ev.event_id, exc.param)
    if opts.input is not None:  # out-of-band context: the given items only
        system = opts.instructions if opts.instructions is not None else o.instructions
        try:
            messages = s.context_of(opts.input, system, s.defaults.max_items)
        except ItemError as exc:
            return s.error(exc.code, exc.message, ev.event_id, exc.param)
    else:
        if not extra:  # a real response (a preview changes nothing)
            fit(s, opts.instructions, tools, max_tokens)
        messages = s.messages(opts.instructions) + extra
    action = StartResponse(
        response_id=rid,
        messages=messages,
        sampling=sampling_params(s.defaults.sampling, o, opts, max_tokens=max_tokens),
        scheduler=sched,
        output_modalities=modalities,
        tools=tools,
    )
    return action, max_out
