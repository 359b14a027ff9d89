"""One paying agent of `scripts/soak`, on the Python `mcp` SDK over the bridge's
streamable HTTP endpoint.

    soak_agent.py URL TOKEN NAME SEED OUT CONTROL [--call-key]

Calls `echo`, `add` and `slow` one after the other, each with a tag of its own
(`<NAME>-<n>`), until CONTROL/stop exists; a call that fails (a tool error, a
JSON-RPC error, a lost connection) is retried with the same tool and the same
arguments (and, with --call-key, the same `brmcp/callKey` in the request's `_meta`
after a lost connection, a new one after a tool error, since a key names one call and
that call has ended) until it is answered or the deadline written in CONTROL/stop passes. A lost connection
opens a new session. Writes one JSON line per attempt and one per finished call to OUT.
"""

import json
import math
import os
import random
import sys
import time

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

# An attempt the bridge has not answered in this long is abandoned (and retried): longer
# than a paid call's payment and the slow tool together, shorter than the drain.
ATTEMPT_TIMEOUT_SECS = 60
# Pause between attempts, so a bridge that is down is not spun against.
RETRY_PAUSE_SECS = 1.0
# The longest a session's handshake may take before it counts as a failed attempt.
CONNECT_TIMEOUT_SECS = 30


def describe(e):
    """An exception's leaves, `Type: message`, without the task groups around them."""
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(describe(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"


def texts(result):
    return [c.text for c in result.content if getattr(c, "type", None) == "text"]


class Agent:
    def __init__(self, url, token, name, seed, out, control, call_key):
        self.url, self.token, self.name = url, token, name
        self.rng = random.Random(f"{seed}/{name}")
        self.seed = seed
        self.out = open(out, "a", buffering=1)
        self.control = control
        self.call_key = call_key

    def emit(self, **fields):
        self.out.write(json.dumps({"agent": self.name, "t": time.time(), **fields}) + "\n")

    def stop(self):
        """None while new calls may start; else the deadline of the retries."""
        try:
            with open(os.path.join(self.control, "stop")) as f:
                return float(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return None

    def next_call(self, n):
        tag = f"{self.name}-{n}"
        roll = self.rng.random()
        if roll < 0.25:
            return tag, "echo", {"tag": tag}
        if roll < 0.8:
            return tag, "add", {"tag": tag, "a": self.rng.randint(0, 999), "b": n}
        return tag, "slow", {"tag": tag, "secs": round(self.rng.uniform(1.0, 4.0), 2)}

    async def run(self):
        self.n = 0
        self.current = None  # (tag, tool, args, call key, attempts so far)
        self.inflight = None  # t0 of the attempt waiting on the bridge
        while not self.done():
            deadline = self.stop()
            if self.current is not None and deadline is not None and time.time() > deadline:
                tag, tool, _, _, attempts = self.current
                self.emit(event="call", tag=tag, tool=tool, final="gave_up", attempts=attempts)
                self.current = None
                continue
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {self.token}"})
            try:
                with anyio.CancelScope(deadline=anyio.current_time() + CONNECT_TIMEOUT_SECS) as scope:
                    async with Client(streamable_http_client(self.url, http_client=http), mode="legacy") as client:
                        scope.deadline = math.inf
                        await self.calls(client)
                if scope.cancelled_caught:
                    self.failed("connect", "no session within the connect timeout")
            except Exception as e:  # noqa: BLE001 - the bridge died, or a call failed
                self.failed("exception", describe(e)[:500])
            finally:
                with anyio.move_on_after(2, shield=True):
                    await http.aclose()
            if not self.done():
                await anyio.sleep(RETRY_PAUSE_SECS)
        self.emit(event="exit", calls=self.n)

    def done(self):
        return self.current is None and self.stop() is not None

    def failed(self, kind, error):
        """Records the failure of the attempt in flight, or of a session that never opened."""
        if self.current is None:
            return
        tag, tool, _, _, attempts = self.current
        if self.inflight is None:
            kind = "connect"
            self.current = self.current[:4] + (attempts + 1,)
            attempts += 1
        self.emit(event="attempt", tag=tag, tool=tool, attempt=attempts, t0=self.inflight or time.time(),
                  t1=time.time(), kind=kind, error=error)
        self.inflight = None

    async def calls(self, client):
        """Makes calls on one session; returns when the agent is done, raises when the
        session is lost (the caller opens another)."""
        while True:
            if self.current is None:
                if self.stop() is not None:
                    return
                self.n += 1
                tag, tool, args = self.next_call(self.n)
                key = f"soak-{self.seed}-{tag}" if self.call_key else None
                self.current = (tag, tool, args, key, 0)
                self.emit(event="start", tag=tag, tool=tool, args=args, key=key)
            tag, tool, args, key, attempts = self.current
            deadline = self.stop()
            if deadline is not None and time.time() > deadline:
                self.emit(event="call", tag=tag, tool=tool, final="gave_up", attempts=attempts)
                self.current = None
                continue
            attempts += 1
            self.current = (tag, tool, args, key, attempts)
            self.inflight = time.time()
            meta = {"brmcp/callKey": key} if key else None
            with anyio.fail_after(ATTEMPT_TIMEOUT_SECS):
                r = await client.call_tool(tool, args, meta=meta)
            t0, self.inflight = self.inflight, None
            kind = "tool_error" if r.is_error else "result"
            self.emit(event="attempt", tag=tag, tool=tool, attempt=attempts, t0=t0,
                      t1=time.time(), kind=kind, texts=texts(r))
            if r.is_error:
                # A key names one call, and that call has ended (in a tool error, which
                # the bot refunds): the retry is a new call, under a key of its own. A
                # lost connection (an exception) keeps the key: that call may still end.
                if key:
                    self.current = (tag, tool, args, f"soak-{self.seed}-{tag}-r{attempts}", attempts)
                await anyio.sleep(RETRY_PAUSE_SECS)
            else:
                self.emit(event="call", tag=tag, tool=tool, final="delivered", attempts=attempts)
                self.current = None


def main():
    url, token, name, seed, out, control = sys.argv[1:7]
    agent = Agent(url, token, name, seed, out, control, "--call-key" in sys.argv[7:])
    anyio.run(agent.run)


if __name__ == "__main__":
    main()
