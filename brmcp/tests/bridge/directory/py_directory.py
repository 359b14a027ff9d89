"""A Python `mcp` SDK agent of the bridge's directory tools over streamable HTTP.

    py_directory.py <url> <token> <provider uid> <answer>

searches, then asks to add the provider, answering the bridge's elicitation with
<answer> ("accept", "decline" or "cancel"). Each step prints one JSON line
{"step": ..., ...}; the Rust test asserts on them.
"""

import json
import sys

import anyio
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def texts(result):
    return [c.text for c in result.content if getattr(c, "type", None) == "text"]


async def main():
    url, token, uid, answer = sys.argv[1:5]
    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action=answer, content={} if answer == "accept" else None)

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with Client(
        streamable_http_client(url, http_client=http),
        mode="legacy",
        elicitation_callback=on_elicit,
    ) as client:
        tools = await client.list_tools()
        emit("tools", names=[t.name for t in tools.tools])
        r = await client.call_tool("directory_search", {"query": "echo"})
        emit("search", texts=texts(r), is_error=r.is_error, structured=r.structured_content)
        r = await client.call_tool("directory_add_bot", {"uid": uid, "name": "echoer"})
        emit("add", texts=texts(r), is_error=r.is_error, asked=asked)
    await http.aclose()
    emit("done")


anyio.run(main)
