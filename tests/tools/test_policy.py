"""The MCP safety policy, pure: allow-list matching, address checks, approvals, output caps."""

from __future__ import annotations

import pytest

from gateway.tools import policy
from gateway.tools.policy import PolicyError

ALLOWED = ("https://tools.example.com/mcp", "http://127.0.0.1:8123/", "https://*.corp.example")


@pytest.mark.parametrize(
    "url",
    [
        "https://tools.example.com/mcp",
        "https://TOOLS.example.com:443/mcp/sub",
        "http://127.0.0.1:8123/anything",
        "https://a.corp.example/x",
        "https://b.a.corp.example/",
    ],
)
def test_allowed_urls(url):
    assert policy.matching_rule(url, ALLOWED) is not None


@pytest.mark.parametrize(
    "url",
    [
        "https://tools.example.com/mcpx",  # not on a segment boundary
        "http://tools.example.com/mcp",  # scheme differs
        "https://tools.example.com:8443/mcp",  # port differs
        "http://127.0.0.1:8124/",
        "http://localhost:8123/",  # a name is not its address
        "https://corp.example/",  # the wildcard is for subdomains only
        "https://evil.com/?https://tools.example.com/mcp",
    ],
)
def test_refused_urls(url):
    assert policy.matching_rule(url, ALLOWED) is None
    with pytest.raises(PolicyError):
        policy.check_url(url, ALLOWED)


def test_empty_allow_list_refuses_everything():
    with pytest.raises(PolicyError, match="mcp_allowed_urls"):
        policy.check_url("https://tools.example.com/mcp", ())


@pytest.mark.parametrize(
    "url",
    ["ftp://x/", "https://user:pw@tools.example.com/mcp", "https://tools.example.com/mcp#f", "http://[::1", "nope"],
)
def test_bad_urls(url):
    with pytest.raises(PolicyError):
        policy.check_url(url, ALLOWED)


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"])
def test_public_addresses_pass(address):
    policy.check_address(address, "tools.example.com")


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.0.0.5", "192.168.1.1", "169.254.169.254", "::1", "fc00::1", "::ffff:127.0.0.1", "100.64.0.1"],
)
def test_internal_addresses_refused_for_a_name(address):
    with pytest.raises(PolicyError, match="internal"):
        policy.check_address(address, "tools.example.com")


def test_an_address_entry_allows_that_address_only():
    policy.check_address("127.0.0.1", "127.0.0.1")
    with pytest.raises(PolicyError):
        policy.check_address("127.0.0.2", "127.0.0.1")
    with pytest.raises(PolicyError):
        policy.check_address("0.0.0.0", "0.0.0.0")  # never a destination


@pytest.mark.parametrize(
    "require,name,expected",
    [
        (None, "add", True),
        ("always", "add", True),
        ("never", "add", False),
        ({"never": {"tool_names": ["add"]}}, "add", False),
        ({"never": {"tool_names": ["add"]}}, "rm", True),
        ({"always": {"tool_names": ["rm"]}, "never": {"tool_names": ["rm", "add"]}}, "rm", True),
    ],
)
def test_needs_approval(require, name, expected):
    assert policy.needs_approval(require, name) is expected


def test_tool_allowed():
    assert policy.tool_allowed(None, "x")
    assert policy.tool_allowed(["x"], "x") and not policy.tool_allowed(["y"], "x")
    assert policy.tool_allowed({"tool_names": ["x"]}, "x") and not policy.tool_allowed({"tool_names": []}, "x")


def test_cap_output_bytes_and_tokens():
    assert policy.cap_output("short", 100, 100) == "short"
    cut = policy.cap_output("é" * 1000, 300, 10_000)
    assert len(cut.encode()) <= 300 and cut.endswith(policy.TRUNCATED)
    words = " ".join(["w"] * 500)
    by_tokens = policy.cap_output(words, 100_000, 50, count=lambda s: len(s.split()))
    assert len(by_tokens.split()) <= 50 and by_tokens.endswith(policy.TRUNCATED)


def test_public_drops_secrets():
    tool = {"type": "mcp", "server_label": "a", "headers": {"X-Key": "s"}, "authorization": "t"}
    assert policy.public(tool) == {"type": "mcp", "server_label": "a"}
