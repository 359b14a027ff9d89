"""A small MCP server on the Python `mcp` SDK, sold through `brmcp serve` (upstream.rs).

Speaks MCP over stdio. $UPSTREAM_STATE (a directory) records what the tests check:
`starts` gets this process's pid on each start, `hang.pid` the pid of a process in the
middle of `hang`, `cancelled` a line per cancelled `wait`.
"""

import os
import pathlib

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

STATE = pathlib.Path(os.environ["UPSTREAM_STATE"])
app = MCPServer("py-upstream")


def record(name, line):
    with open(STATE / name, "a") as f:
        f.write(f"{line}\n")


@app.tool(annotations=ToolAnnotations(readOnlyHint=True, title="Echo"))
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@app.tool()
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


@app.tool()
def pricey() -> str:
    """Priced above the bridge's per-call cap."""
    return "never paid for"


@app.tool()
async def steps(n: int, ctx: Context) -> str:
    """Report n progress steps, then answer."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
        await anyio.sleep(0.1)
    return f"done {n}"


@app.tool()
async def wait() -> str:
    """Wait (for a cancellation)."""
    try:
        await anyio.sleep(30)
    except anyio.get_cancelled_exc_class():
        record("cancelled", "wait")
        raise
    return "waited"


@app.tool()
async def hang() -> str:
    """Hang until killed."""
    (STATE / "hang.pid").write_text(str(os.getpid()))
    await anyio.sleep(60)
    return "survived"


@app.tool()
def fail() -> str:
    """Always fails."""
    raise RuntimeError("upstream refuses")


@app.tool()
def secret() -> str:
    """Not named in the upstream tests' brmcp.json: never sold there."""
    return "the secret"


@app.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `extra` and says the tool list changed."""
    app.add_tool(lambda: "extra!", name="extra", description="Added at run time")
    await ctx.request_context.session.send_tool_list_changed()
    return "grown"


@app.resource("py://hidden")
def hidden() -> str:
    """Not offered: brmcp.json does not set resources for this upstream."""
    return "hidden"


@app.prompt()
def hidden_prompt() -> str:
    """Not offered: brmcp.json does not set prompts for this upstream."""
    return "hidden"


if __name__ == "__main__":
    record("starts", os.getpid())
    app.run()
