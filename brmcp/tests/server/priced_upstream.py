"""An upstream MCP server whose tool is priced by a companion tool (priced_upstream.rs),
speaking raw JSON-RPC over stdio. Standard library only.

`search` answers `searched <q>` and counts its runs in the file named by the
`RUNS_FILE` environment variable. `search-price`, its companion, answers the text of
its `quote` argument as it is (so the test scripts good, above-bound and malformed
prices), or a tool error when `fail` is true.
"""

import json
import os
import sys


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(id_, result):
    send({"jsonrpc": "2.0", "id": id_, "result": result})


def text(id_, body, error=False):
    answer(id_, {"content": [{"type": "text", "text": body}], "isError": error})


SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}, "quote": {"type": "string"},
                                           "fail": {"type": "boolean"}}}
TOOLS = [
    {"name": "search", "description": "Searches", "inputSchema": SCHEMA},
    {"name": "search-price", "description": "The price of a search", "inputSchema": SCHEMA},
]

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    method, params = message["method"], message.get("params") or {}
    args = params.get("arguments") or {}
    if method == "initialize":
        answer(message["id"], {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "priced", "version": "1"},
        })
    elif method == "tools/list":
        answer(message["id"], {"tools": TOOLS})
    elif method == "tools/call" and params.get("name") == "search-price":
        if args.get("fail"):
            text(message["id"], "the price service is down", error=True)
        else:
            text(message["id"], str(args.get("quote", "")))
    elif method == "tools/call" and params.get("name") == "search":
        with open(os.environ["RUNS_FILE"], "a") as runs:
            runs.write("run\n")
        text(message["id"], "searched " + str(args.get("q", "")))
    elif method == "ping":
        answer(message["id"], {})
    else:
        send({"jsonrpc": "2.0", "id": message["id"],
              "error": {"code": -32601, "message": "method not found"}})
