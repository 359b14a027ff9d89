"""The Python `mcp` SDK as an agent of a bot that sells upstream MCP servers
(run by upstream.rs): upstream_client.py <url> <token>.

Each step prints one JSON line {"step": ..., ...}; the Rust test asserts on them.
"""

import json
import sys
import time

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def texts(result):
    return [c.text for c in result.content if getattr(c, "type", None) == "text"]


async def call(client, step, name, args=None, **kwargs):
    """Calls a tool; emits its texts and error flag, or the protocol error."""
    try:
        r = await client.call_tool(name, args or {}, **kwargs)
        emit(step, texts=texts(r), is_error=bool(r.is_error))
        return r
    except Exception as e:  # noqa: BLE001 - an unknown tool is a protocol error
        emit(step, error=str(e))
        return None


async def scenario(client, changes):
    tools = await client.list_tools()
    emit(
        "tools",
        names=[t.name for t in tools.tools],
        meta={t.name: (t.meta or {}) for t in tools.tools},
        annotations={
            t.name: (t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else None)
            for t in tools.tools
        },
        schemas={t.name: t.input_schema for t in tools.tools},
    )

    await call(client, "echo", "py_echo", {"text": "hi"})
    await call(client, "add", "py_add", {"a": 2, "b": 3})
    await call(client, "pricey", "py_pricey")
    await call(client, "everything_echo", "everything_echo", {"message": "hello"})
    await call(client, "everything_sum", "everything_get-sum", {"a": 20, "b": 22})
    await call(client, "web_sum", "web_get-sum", {"a": 3, "b": 4})

    for step, name, args in [
        ("steps", "py_steps", {"n": 3}),
        ("everything_progress", "everything_trigger-long-running-operation", {"duration": 1, "steps": 3}),
    ]:
        seen = []

        async def on_progress(progress, total, message, seen=seen):
            seen.append([progress, total, message])

        r = await client.call_tool(name, args, progress_callback=on_progress)
        emit(step, texts=texts(r), is_error=bool(r.is_error), seen=seen)

    with anyio.move_on_after(1.5) as scope:
        await client.call_tool("py_wait", {})
    emit("cancel", cancelled=scope.cancelled_caught)

    await call(client, "secret", "py_secret")
    await call(client, "get_env", "everything_get-env")
    await call(client, "fail", "py_fail")

    await call(client, "grow", "py_grow")
    with anyio.move_on_after(5):
        while not changes:
            await anyio.sleep(0.05)
    tools = await client.list_tools()
    emit("grown", changes=len(changes), names=[t.name for t in tools.tools])
    await call(client, "extra", "py_extra")

    resources = await client.list_resources()
    uris = [str(r.uri) for r in resources.resources]
    doc = "demo://resource/static/document/features.md"
    read = await client.read_resource(doc)
    emit(
        "resources",
        uris=uris,
        read=[getattr(c, "text", None) for c in read.contents],
    )
    prompts = await client.list_prompts()
    got = await client.get_prompt("everything_simple-prompt")
    emit(
        "prompts",
        names=[p.name for p in prompts.prompts],
        got=[getattr(m.content, "text", None) for m in got.messages],
    )

    await call(client, "hang", "py_hang")
    # The upstream was killed mid-call: retry a paid call until it is back.
    errors = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = await client.call_tool("py_add", {"a": 1, "b": 1})
        if not r.is_error:
            emit("after_restart", texts=texts(r), errors=errors)
            break
        errors.append(texts(r))
        await anyio.sleep(0.2)
    else:
        emit("after_restart", texts=None, errors=errors)
    # Give the cancellation and the last answers time to settle.
    await anyio.sleep(0.5)


async def main():
    url, token = sys.argv[1], sys.argv[2]
    changes = []

    async def on_message(message):
        if getattr(message, "method", None) == "notifications/tools/list_changed" or (
            type(message).__name__ == "ToolListChangedNotification"
        ):
            changes.append(1)

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with Client(
        streamable_http_client(url, http_client=http),
        mode="legacy",
        message_handler=on_message,
    ) as client:
        await scenario(client, changes)
    await http.aclose()
    emit("done")


if __name__ == "__main__":
    anyio.run(main)
