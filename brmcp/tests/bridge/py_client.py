"""The Python `mcp` SDK as an agent of the brmcp bridge (run by bridge_interop_python.rs).

    py_client.py http <url> <token> <mode>      streamable HTTP with a bearer token
    py_client.py stdio <mode> <command> [args]  the bridge spawned over stdio
    py_client.py elicit <url> <token> <answer> [mode]
                                                calls the paid tool in approval mode,
                                                answering the bridge's elicitation
                                                with <answer> ("accept" or "decline");
                                                <mode> "legacy" (the default) asks by
                                                a request, "auto" by input_required
    py_client.py bot-elicit <url> <token>       on 2026-07-28 ("auto"), calls the bot's
                                                `elicit` tool (two questions), then gets
                                                its prompt `ask` and reads its resource
                                                `test://ask` (one question each),
                                                answering through the elicitation callback

<mode> is the SDK's: "auto" (2026-07-28 stateless, with fallback) or "legacy"
(initialize handshake). Each step prints one JSON line {"step": ..., ...}; the Rust test
asserts on them. A step that raises prints {"step": ..., "error": ...}.
"""

import json
import sys

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def texts(result):
    return [c.text for c in result.content if getattr(c, "type", None) == "text"]


async def scenario(client, mode, client_logs):
    tools = await client.list_tools()
    emit(
        "tools",
        names=[t.name for t in tools.tools],
        meta={t.name: (t.meta or {}) for t in tools.tools},
        echo_schema=next(t.input_schema for t in tools.tools if t.name == "echo"),
    )

    r = await client.call_tool("echo", {"text": "hi"})
    emit("echo", texts=texts(r), structured=r.structured_content, is_error=r.is_error)

    r = await client.call_tool("fortune", {})
    emit("fortune", texts=texts(r), is_error=r.is_error)

    seen = []

    async def on_progress(progress, total, message):
        seen.append([progress, total, message])

    r = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
    emit("progress", texts=texts(r), seen=seen)

    if mode == "legacy":
        try:
            await client.set_logging_level("debug")
        except Exception:  # noqa: BLE001 - a bot without the logging capability
            pass
    r = await client.call_tool("log", {"line": "disk almost full"})
    with anyio.move_on_after(2):
        while not client_logs:
            await anyio.sleep(0.02)
    emit("log", texts=texts(r), logs=client_logs)

    cancelled = False
    with anyio.move_on_after(1.5) as scope:
        await client.call_tool("wait", {})
    cancelled = scope.cancelled_caught
    emit("cancel", cancelled=cancelled)
    # Give the cancellation time to travel before the process (and session) ends.
    await anyio.sleep(1.0)


async def elicit(url, token, answer, mode):
    """Approves or declines the paid call's payment through the elicitation callback."""
    from mcp import types

    asked = []

    async def on_elicit(context, params):
        asked.append({"message": params.message, "schema": params.requested_schema})
        # Longer than the bridge's progress interval: progress keeps the call alive.
        await anyio.sleep(6)
        return types.ElicitResult(action=answer, content={} if answer == "accept" else None)

    seen = []

    async def on_progress(progress, total, message):
        seen.append([progress, total, message])

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with Client(
        streamable_http_client(url, http_client=http),
        mode=mode,
        elicitation_callback=on_elicit,
    ) as client:
        r = await client.call_tool("fortune", {}, progress_callback=on_progress)
        emit("fortune", texts=texts(r), is_error=r.is_error, asked=asked, seen=seen)
    await http.aclose()


async def bot_elicit(url, token):
    """Answers a bot's own elicitation, relayed by the bridge as input_required."""
    from mcp import types

    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "py"})

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with Client(
        streamable_http_client(url, http_client=http),
        mode="auto",
        elicitation_callback=on_elicit,
    ) as client:
        r = await client.call_tool("elicit", {"times": 2})
        emit("elicit", texts=texts(r), is_error=r.is_error, asked=asked)
        # A prompt and a resource whose reads ask too.
        del asked[:]
        prompt = await client.get_prompt("ask")
        emit("prompt", text=prompt.messages[0].content.text, asked=list(asked))
        del asked[:]
        resource = await client.read_resource("test://ask")
        emit("resource", text=resource.contents[0].text, asked=list(asked))
    await http.aclose()


async def main():
    kind = sys.argv[1]
    if kind == "bot-elicit":
        await bot_elicit(sys.argv[2], sys.argv[3])
        emit("done")
        return
    if kind == "elicit":
        mode = sys.argv[5] if len(sys.argv) > 5 else "legacy"
        await elicit(sys.argv[2], sys.argv[3], sys.argv[4], mode)
        emit("done")
        return
    logs = []

    async def on_log(params):
        logs.append({"level": params.level, "logger": params.logger, "data": params.data})

    if kind == "http":
        url, token, mode = sys.argv[2], sys.argv[3], sys.argv[4]
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            logging_callback=on_log,
            log_level="debug",
        ) as client:
            await scenario(client, mode, logs)
        # The SDK refuses to connect with a wrong token (it reports the 401 as an
        # MCPError); the same request over the SDK's HTTP client shows the status.
        bad = create_mcp_http_client(headers={"Authorization": "Bearer wrong"})
        sdk_refused = False
        try:
            async with Client(streamable_http_client(url, http_client=bad), mode=mode) as client:
                await client.list_tools()
        except Exception:  # noqa: BLE001 - the SDK's error shape varies by lifecycle
            sdk_refused = True
        raw = await bad.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        emit(
            "wrong_token",
            sdk_refused=sdk_refused,
            status=raw.status_code,
            www_authenticate=raw.headers.get("www-authenticate"),
        )
        await http.aclose()
        await bad.aclose()
    else:
        mode, command, args = sys.argv[2], sys.argv[3], sys.argv[4:]
        async with Client(
            StdioServerParameters(command=command, args=args),
            mode=mode,
            logging_callback=on_log,
            log_level="debug",
        ) as client:
            await scenario(client, mode, logs)
    emit("done")


if __name__ == "__main__":
    anyio.run(main)
