"""A started response's life in the session: text chunks, tool calls, its end (done, cancelled, abandoned). Pure.

A mixin of ``Session`` (the engine's results reach it through ``Session.handle``): it turns what the
engine produced into the response's server events, and closes the response with exactly one
``response.done``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..core.keylimits import BoundLimits
from . import functions
from . import server_events as se
from .actions import CancelResponse, Output
from .conversation import Conversation
from .response_ending import ResponseEnding, ending_of
from .responses import ResponseState, final_events


class ResponseFlow:
    response: ResponseState | None
    conversation: Conversation
    finish_hook: Callable[[str, ResponseEnding], dict[str, Any] | None] | None
    limiter: BoundLimits | None

    if TYPE_CHECKING:  # the rest of Session, which this mixin uses (defined here, they would shadow it)

        def _out(self, *events: dict[str, Any], actions: list[Any] | None = None) -> Output: ...  # Session's

        def speak_chunk(
            self, r: ResponseState, text: str, events: list[dict[str, Any]]
        ) -> Output: ...  # SpeechOutput's

        def spoken_closed(self, r: ResponseState, item: dict[str, Any] | None) -> None: ...  # SpeechOutput's

        def mcp_on_call(self, response_id: str, call: Any) -> Output | None: ...  # McpOutput's

        def mcp_on_done(self, response_id: str, reason: str) -> Output | None: ...  # McpOutput's

        def mcp_end(self, r: ResponseState) -> None: ...  # McpOutput's

    def cancel(self, reason: str) -> Output:
        """Priority path: end the active response now (``response.done`` cancelled)."""
        r = self.response
        if r is None:
            return Output()
        out = self._finish(r, ResponseEnding.cancelled(reason))
        out.actions.insert(0, CancelResponse(r.id))
        return out

    def abandon(self, reason: str) -> Output:
        """End the active response ``incomplete`` because the server failed it (the replica running it
        died): its delivered text stays in the conversation, unlike a cancel's."""
        r = self.response
        if r is None:
            return Output()
        # images still denoising there never finish: closed incomplete now (final_events)
        return self._finish(r, ResponseEnding.incomplete(reason), wait_images=False)

    def on_chunk(self, response_id: str, text: str) -> Output:
        r = self.response
        if r is None or r.id != response_id or not text:
            return Output()  # late chunk of a cancelled/finished response: dropped
        if not r.started and r.known_tools:  # tools offered: a call may follow
            if not text.strip():  # whitespace alone opens no message yet (the newline between calls is no reply)
                r.held += text
                return Output()
            text, r.held = r.held + text, ""
        return self._text_events(r, text)

    def _text_events(self, r: ResponseState, text: str) -> Output:
        events = [] if r.started else self._open_message(r)
        r.text += text
        if r.audio is not None:
            return self.speak_chunk(r, text, events)  # type: ignore[no-any-return]
        events.append(se.output_text_delta(se.PartAt(r.id, r.item_id, r.text_index), text))
        return self._out(*events)

    def _open_message(self, r: ResponseState) -> list[dict[str, Any]]:
        """The assistant message's opening events; it is in the conversation from now on, as in GA."""
        events = r.start_events(self.conversation.last_id)
        if r.store:
            self.conversation.append(r.item("in_progress"))
        return events

    def on_tool_call(self, response_id: str, body: str) -> Output:
        """A call the scheduler cut out of the text (whole): a function_call output item, streamed.

        It joins the conversation when it is announced (``status: "completed"``), so the client may send its
        ``function_call_output`` at once, before ``response.done``, as the Agents SDKs do."""
        r = self.response
        call = functions.parse(body, r.known_tools) if r is not None and r.id == response_id else None
        if r is None or call is None:
            return Output()  # late, or not a call of an offered tool: dropped, never shown
        if r.calls and not r.parallel:
            return Output()  # parallel_tool_calls false: the first call only
        mcp = self.mcp_on_call(r.id, call)  # the gateway runs it (gateway.tools)
        if mcp is not None:
            return mcp
        item, events = functions.call_events(r.id, call, r.take_index, self.conversation.last_id)
        r.calls.append(item)
        if r.store:
            self.conversation.append(item)
        else:  # out-of-band: the call is the response's only, not the conversation's
            events = [e for e in events if not e["type"].startswith("conversation.")]
        return self._out(*events)

    def on_done(self, response_id: str, reason: str, metrics: dict[str, Any], usage: dict[str, Any]) -> Output:
        r = self.response
        if r is None or r.id != response_id:
            return Output()  # already ended (cancel path)
        calls = self.mcp_on_done(r.id, reason)  # MCP calls to run: the response goes on after them
        if calls is not None:
            return calls
        return self._finish(r, ending_of(reason, metrics, usage))

    def _finish(self, r: ResponseState, ending: ResponseEnding, wait_images: bool = True) -> Output:
        status = ending.status
        if wait_images and status != "cancelled" and r.waiting:  # text is done; images or speech still being made
            r.ending = ending
            return Output()
        if self.response is not r:
            raise RuntimeError(f"expected active response {r.id}, found {self.response and self.response.id}")
        self.response = None
        self.mcp_end(r)
        # a reply of whitespace alone is still a reply, unless it only separated calls (or was never delivered)
        # (spoken, whitespace says nothing)
        held = r.held and not r.calls and status != "cancelled" and r.audio is None
        opened = self._text_events(r, r.held) if held else Output()
        item = r.item("completed" if status == "completed" else "incomplete") if r.started else None
        kept = self.conversation.get(r.item_id) if r.store else None
        if item is not None and kept is not None:  # exactly the delivered text (unless the client deleted it)
            kept.update(item)
        self.spoken_closed(r, item)
        if self.finish_hook is not None:
            ending = replace(ending, metrics=self.finish_hook(r.id, ending))
        events = final_events(r, item, ending)
        if self.limiter is not None:  # what the key has left, after this response's tokens
            left = self.limiter.charge(int(ending.usage.get("total_tokens", 0)))
            events.append(se.rate_limits_updated([x.wire() for x in left]))
        return opened.extend(self._out(*events))
