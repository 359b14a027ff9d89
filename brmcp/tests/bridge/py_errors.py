"""The Python `mcp` SDK meeting the bridge's refusals (run by interop_errors.rs).

    py_errors.py <base url> <good token> <mode>

Tries a wrong token, an unknown bot and an unavailable bot; prints one JSON line per
case, {"step": case, "error": <what the SDK raised, as a user sees it>}, then
{"step": "done"}.
"""

import json
import sys

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def leaves(e):
    """The messages of `e`, or of the exceptions it groups (anyio's task groups wrap
    what the SDK raised; the traceback a user sees shows them)."""
    inner = getattr(e, "exceptions", None)
    if not inner:
        return [f"{type(e).__name__}: {e}"]
    return [m for sub in inner for m in leaves(sub)]


async def attempt(url, token, mode):
    """What the SDK raised connecting to `url` and listing the tools, or None."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    try:
        with anyio.fail_after(30):
            async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                await client.list_tools()
        return None
    except Exception as e:  # noqa: BLE001 - the error as the SDK gives it to its user
        return "; ".join(leaves(e))
    finally:
        await http.aclose()


async def main():
    base, token, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    emit("wrong_token", error=await attempt(f"{base}/mcp/fortune", "wrong", mode))
    emit("unknown_bot", error=await attempt(f"{base}/mcp/nosuch", token, mode))
    emit("unavailable", error=await attempt(f"{base}/mcp/offline", token, mode))
    emit("done")


if __name__ == "__main__":
    anyio.run(main)
