"""The MCP server `scripts/soak` sells through `brmcp serve` (a stdio upstream).

Three tools, each taking a unique `tag` from the soak's agents and answering a text
that carries it and this run's id, `run=<pid>.<n>`, so every answer can be traced to
one execution: `echo` (free), `add` (100 atoms) and `slow` (2,000 atoms, sleeps
`secs`). $SOAK_UPSTREAM_STATE (a directory) records, one JSON line per event in
`runs.jsonl`, each execution's start and end, and this process's pid in `pid` on each
start. Needs the `mcp` SDK (the venv `scripts/test-deps` installs).
"""

import itertools
import json
import os
import pathlib
import time

import anyio
from mcp.server.mcpserver import MCPServer

STATE = pathlib.Path(os.environ["SOAK_UPSTREAM_STATE"])
PID = os.getpid()
RUNS = itertools.count(1)
app = MCPServer("soak-upstream")


def record(**fields):
    # One short line per write on an O_APPEND file: whole lines, whoever else appends.
    line = json.dumps({"t": time.time(), "pid": PID, **fields}) + "\n"
    fd = os.open(STATE / "runs.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def begin(tool, tag):
    run = f"{PID}.{next(RUNS)}"
    record(event="start", tool=tool, tag=tag, run=run)
    return run


@app.tool()
def echo(tag: str) -> str:
    """Echo the tag (free)."""
    run = begin("echo", tag)
    record(event="done", tool="echo", tag=tag, run=run)
    return f"echo {tag} run={run}"


@app.tool()
def add(tag: str, a: int, b: int) -> str:
    """Add two numbers."""
    run = begin("add", tag)
    record(event="done", tool="add", tag=tag, run=run)
    return f"add {tag} {a + b} run={run}"


@app.tool()
async def slow(tag: str, secs: float) -> str:
    """Wait a few seconds, then answer."""
    run = begin("slow", tag)
    await anyio.sleep(min(max(secs, 0.0), 30.0))
    record(event="done", tool="slow", tag=tag, run=run)
    return f"slow {tag} run={run}"


if __name__ == "__main__":
    (STATE / "pid").write_text(f"{PID}\n")
    app.run()
