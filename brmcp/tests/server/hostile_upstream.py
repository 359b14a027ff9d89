"""A hostile MCP upstream speaking raw JSON-RPC over stdio (standard library only),
for upstream_bounds.rs and upstream_floods.rs.

$STATE (a directory) gets a line in `lists` per tools/list request and one in `env`
with this process's variable names. Modes (argv[1]):

- `tools`: a fixed list of tools (the description of `flood` carries a version that
  `flood` with "changing" bumps):
  `env` answers the variable names it sees; `flood` sends n tools/list_changed;
  `progress` sends n progress notifications; `slow` reports progress every second for
  secs seconds; `silent` sleeps secs seconds; `huge` answers a text of n bytes.
- `pages`: tools/list answers 10 new tools and a nextCursor on every page, slowly
  (0.3 s a page) once $STATE/slow exists; when $STATE/poke appears it is removed and
  tools/list_changed is sent.
"""

import json
import os
import pathlib
import sys
import threading
import time

STATE = pathlib.Path(os.environ["STATE"])
MODE = sys.argv[1]
OUT = threading.Lock()
VERSION = [0]


def send(message):
    line = json.dumps(message) + "\n"
    with OUT:
        sys.stdout.write(line)
        sys.stdout.flush()


def record(name, line):
    with open(STATE / name, "a") as f:
        f.write(f"{line}\n")


def answer(id, result):
    send({"jsonrpc": "2.0", "id": id, "result": result})


def text(id, value):
    answer(id, {"content": [{"type": "text", "text": value}], "isError": False})


def notify(method, params=None):
    message = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    send(message)


def tool(name, description):
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object"},
    }


def tools_page(params):
    record("lists", "list")
    if MODE == "pages":
        page = int((params or {}).get("cursor") or 0)
        if (STATE / "slow").exists():
            time.sleep(0.3)
        return {
            "tools": [tool(f"p{page}_{i}", "a page") for i in range(10)],
            "nextCursor": str(page + 1),
        }
    names = ["env", "progress", "slow", "silent", "huge"]
    listed = [tool(n, n) for n in names]
    listed.append(tool("flood", f"flood v{VERSION[0]}"))
    return {"tools": listed}


def call(id, params):
    name = params["name"]
    args = params.get("arguments") or {}
    token = (params.get("_meta") or {}).get("progressToken")
    if name == "env":
        text(id, json.dumps(sorted(os.environ)))
    elif name == "flood":
        for _ in range(args.get("n", 2000)):
            if args.get("changing"):
                VERSION[0] += 1
            notify("notifications/tools/list_changed")
        text(id, "flooded")
    elif name == "progress":
        n = args.get("n", 20000)
        for i in range(1, n + 1):
            notify("notifications/progress",
                   {"progressToken": token, "progress": i, "total": n})
        text(id, f"sent {n}")
    elif name == "slow":
        secs = args.get("secs", 5)
        for i in range(1, secs + 1):
            time.sleep(1)
            notify("notifications/progress",
                   {"progressToken": token, "progress": i, "total": secs})
        text(id, "done")
    elif name == "silent":
        time.sleep(args.get("secs", 5))
        text(id, "late")
    elif name == "huge":
        text(id, "x" * args.get("n", 1 << 20))
    else:
        send({"jsonrpc": "2.0", "id": id,
              "error": {"code": -32602, "message": "unknown tool"}})


def poke():
    while True:
        time.sleep(0.05)
        try:
            (STATE / "poke").unlink()
        except FileNotFoundError:
            continue
        notify("notifications/tools/list_changed")


def main():
    record("env", json.dumps(sorted(os.environ)))
    if MODE == "pages":
        threading.Thread(target=poke, daemon=True).start()
    for line in sys.stdin:
        message = json.loads(line)
        method = message.get("method")
        id = message.get("id")
        if id is None:
            continue
        params = message.get("params")
        if method == "initialize":
            answer(id, {
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "hostile", "version": "0"},
            })
        elif method == "tools/list":
            # Pages on their own thread: a slow listing must not hold the reader.
            threading.Thread(target=lambda: answer(id, tools_page(params)),
                             daemon=True).start()
        elif method == "tools/call":
            threading.Thread(target=call, args=(id, params), daemon=True).start()
        elif method == "ping":
            answer(id, {})
        else:
            send({"jsonrpc": "2.0", "id": id,
                  "error": {"code": -32601, "message": "method not found"}})


main()
