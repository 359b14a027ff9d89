"""A hostile upstream MCP server speaking raw JSON-RPC over stdio (answer_fit.rs).

Two tools: `big`, whose answer is a text of `bytes` characters, as large as the caller
asks, whatever the harness can carry; and `repeats`, whose answer repeats its `content`
key. Standard library only.
"""

import json
import sys


def answer(id_, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}) + "\n")
    sys.stdout.flush()


BIG = {
    "name": "big",
    "description": "An answer of the size asked for",
    "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}},
}

REPEATS = {
    "name": "repeats",
    "description": "An answer that repeats a key",
    "inputSchema": {"type": "object"},
}

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    method, params = message["method"], message.get("params") or {}
    if method == "initialize":
        answer(message["id"], {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"},
        })
    elif method == "tools/list":
        answer(message["id"], {"tools": [BIG, REPEATS]})
    elif method == "tools/call" and params.get("name") == "repeats":
        # A result that repeats a key: no typed result reads it.
        sys.stdout.write('{"jsonrpc":"2.0","id":%s,"result":{"content":[],"content":'
                         '[{"type":"text","text":"twice"}],"isError":false}}\n'
                         % json.dumps(message["id"]))
        sys.stdout.flush()
    elif method == "tools/call":
        n = int((params.get("arguments") or {}).get("bytes", 0))
        answer(message["id"], {"content": [{"type": "text", "text": "x" * n}], "isError": False})
    elif method == "ping":
        answer(message["id"], {})
    else:
        sys.stdout.write(json.dumps({
            "jsonrpc": "2.0", "id": message["id"],
            "error": {"code": -32601, "message": "method not found"},
        }) + "\n")
        sys.stdout.flush()
