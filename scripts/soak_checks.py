"""The checks of `scripts/soak` (see its header) and its report: what the bridge's spend
log, the bot's ledger, the upstream's record of executions and each agent's record
say once the run has stopped. Read-only: each SQLite file is read through a copy.
"""

import contextlib
import json
import re
import shutil
import sqlite3
import time
from pathlib import Path

# Prices the upstream's tools are sold at, atoms: a free tool, a 100-atom add and a
# 2,000-atom slow call.
PRICES = {"echo": 0, "add": 100, "slow": 2000}
# What an answer's text carries: the tool, the call's tag and the execution's run id.
ANSWER = re.compile(r"\b(echo|add|slow) (a\d+-\d+)\b[^\"]*?run=(\d+\.\d+)")
# The bot's payment_required body, as a refused payment shows it raw.
RAW_PAYMENT_REQUIRED = re.compile(r'"error"\s*:\s*"payment_required"')


def read_db(path, scratch):
    """A connection to a copy of the SQLite file at `path` (and its WAL), so nothing of
    the original is touched, whether or not its process still runs."""
    copy = scratch / f"{path.parent.name}-{path.name}"
    for suffix in ("", "-wal"):
        src = Path(f"{path}{suffix}")
        dst = Path(f"{copy}{suffix}")
        with contextlib.suppress(FileNotFoundError):
            dst.unlink()
        if src.exists():
            shutil.copyfile(src, dst)
    db = sqlite3.connect(copy)
    db.row_factory = sqlite3.Row
    return db


def tables(db):
    """The names of the tables of `db` (a newer schema may add some)."""
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


class Summary:
    """The counts the report prints."""


def check(soak):
    """Runs every check on the stopped run `soak`, adding violations to
    `soak.failures`; returns the counts."""
    return Checks(soak).run()


class Checks:
    """The checks of one run; each violation is a (check, what) in `soak.failures`."""

    def __init__(self, soak):
        self.soak = soak
        self.alice, self.bob, self.agents = soak.alice, soak.bob, soak.agents
        self.kills, self.failures = soak.kills, soak.failures

    def run(self):
        soak = self.soak
        scratch = soak.root / "scratch"
        scratch.mkdir(exist_ok=True)
        spend = read_db(soak.bridge_dir / "mcpspend.sqlite", scratch)
        ledger = read_db(soak.alice_dir / "brmcp.sqlite", scratch)
        records = []
        for a in self.agents:
            path = soak.agents_dir / f"{a['name']}.jsonl"
            if path.exists():
                records += [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
        runs = []
        runs_path = soak.upstream_state / "runs.jsonl"
        if runs_path.exists():
            runs = [json.loads(l) for l in runs_path.read_text().splitlines() if l.strip()]
        journal = read_db(soak.bridge_dir / "mcpcalls.sqlite", scratch)
        s = Summary()
        self.check_money(spend, ledger, s)
        completed = self.check_outcomes(ledger, journal, records, runs, s)
        self.check_credit(spend, completed, s)
        self.check_agents(records, s)
        self.check_faults(records, s)
        return s

    def fail(self, check, what):
        self.failures.append((check, what))

    def check_money(self, spend, ledger, s):
        rows = spend.execute("SELECT status, count(*) n, coalesce(sum(atoms), 0) a FROM spend "
                             "WHERE bot = ? GROUP BY status", (self.alice,)).fetchall()
        by = {r["status"]: (r["n"], r["a"]) for r in rows}
        paid_n, paid = by.get("paid", (0, 0))
        pending_n, pending = by.get("pending", (0, 0))
        failed_n, _ = by.get("failed", (0, 0))
        tips = ledger.execute("SELECT credited, count(*) n, coalesce(sum(matoms), 0) m FROM tips "
                              "WHERE caller = ? GROUP BY credited", (self.bob,)).fetchall()
        tip = {r["credited"]: (r["n"], r["m"]) for r in tips}
        credited_n, credited_m = tip.get(1, (0, 0))
        uncredited_n, _ = tip.get(0, (0, 0))
        audit = dict(ledger.execute("SELECT action, coalesce(sum(matoms), 0) FROM audit "
                                    "WHERE caller = ? GROUP BY action", (self.bob,)).fetchall())
        balance_m = (ledger.execute("SELECT matoms FROM balances WHERE caller = ?", (self.bob,))
                     .fetchone() or [0])[0]
        charges = {r["state"]: (r["n"], r["a"]) for r in ledger.execute(
            "SELECT state, count(*) n, coalesce(sum(price_atoms), 0) a FROM calls "
            "WHERE caller = ? AND price_atoms > 0 GROUP BY state", (self.bob,))}
        completed_n, completed = charges.get("completed", (0, 0))
        charged_pending_n, charged_pending = charges.get("pending", (0, 0))
        refunded_n, _ = charges.get("refunded", (0, 0))
        pruned = ledger.execute("SELECT coalesce(sum(completed), 0), coalesce(sum(completed_atoms), 0) "
                                "FROM pruned WHERE caller = ?", (self.bob,)).fetchone()
        completed_n += pruned[0]
        completed += pruned[1]
        reserved_m = None
        if "waiting" in tables(ledger):
            reserved_m = ledger.execute("SELECT coalesce(sum(reserved_matoms), 0) FROM waiting "
                                        "WHERE caller = ?", (self.bob,)).fetchone()[0]
        s.money = dict(paid_n=paid_n, paid=paid, pending_n=pending_n, failed_n=failed_n,
                       tips_n=credited_n, tips=credited_m / 1000, balance=balance_m / 1000,
                       completed_n=completed_n, completed=completed, refunded_n=refunded_n,
                       charged_pending_n=charged_pending_n, reserved=None if reserved_m is None
                       else reserved_m / 1000)
        if uncredited_n:
            self.fail("money", f"{uncredited_n} tip(s) received and not credited by the bot")
        # A payment still pending is one whose outcome the bridge never learned (it died
        # between recording the payment and hearing of its tip, which may or may not have
        # been sent): the spend log keeps it counted, as documented, so the bot may have
        # received it or not.
        if not (paid_n <= credited_n <= paid_n + pending_n
                and paid * 1000 <= credited_m <= (paid + pending) * 1000):
            self.fail("money", f"the bridge paid {paid_n} tip(s), {paid} atoms"
                      + (f" (and {pending_n}, {pending} atoms, are pending)" if pending_n else "")
                      + f"; the bot credited {credited_n}, {credited_m / 1000:g} atoms")
        credits = credited_m + audit.get("credit", 0)
        held = balance_m + (completed + charged_pending) * 1000
        if credits != held:
            self.fail("money", f"at the bot, tips and credits {credits / 1000} atoms != balance "
                      f"{balance_m / 1000} + completed charges {completed} + pending charges "
                      f"{charged_pending} atoms")
        if charged_pending_n:
            self.fail("money", f"{charged_pending_n} charged call(s) still pending at the bot")

    def check_outcomes(self, ledger, journal, records, runs, s):
        """Checks 2 and 3; returns the completed charges as (tag, tool, price).

        The bot keeps a caller's newest outcomes only (`MAX_OUTCOMES_PER_CALLER`, 1,024,
        and 16 MiB; every agent of the bridge is one caller) and drops the oldest
        first, so a long run's older charges have none. Those alone, the ones older
        than the oldest outcome still kept, are traced through the bridge's call
        journal, which keeps the result the bot answered under the same key (for 30
        minutes, up to 1,000 rows an agent): a charge newer than that with no outcome
        is a loss."""
        answered = {}
        if "calls" in tables(journal):
            answered = {r["call_key"]: r["outcome"] for r in journal.execute(
                "SELECT call_key, outcome FROM calls WHERE bot = ? AND outcome_kind = 'result'",
                (self.alice,))}
        oldest_kept = ledger.execute("SELECT min(id) FROM calls WHERE caller = ? AND outcome "
                                     "IS NOT NULL", (self.bob,)).fetchone()[0]
        delivered = {}  # tag -> set of run ids the agent got as a result
        seen = {}  # tag -> short history of its attempts
        for r in records:
            if r["event"] != "attempt":
                continue
            seen.setdefault(r["tag"], []).append(
                r["kind"] + (": " + (" | ".join(r.get("texts") or []) or r.get("error", ""))[:160]
                             if r["kind"] != "result" else ""))
            if r["kind"] == "result":
                for text in r.get("texts") or []:
                    for m in ANSWER.finditer(text):
                        delivered.setdefault(m.group(2), set()).add(m.group(3))
        completed = []
        charged = {}  # tag -> [(ledger id, run, finished_at)]
        for row in ledger.execute("SELECT id, tool, price_atoms, call_key, key_held, outcome, "
                                  "finished_at FROM calls WHERE caller = ? AND state = "
                                  "'completed' AND price_atoms > 0 ORDER BY id", (self.bob,)):
            outcome = row["outcome"]
            dropped = row["key_held"] == 1 and oldest_kept is not None and row["id"] < oldest_kept
            if outcome is None and dropped:
                outcome = answered.get(row["call_key"])
            m = ANSWER.search(outcome or "")
            if m is None:
                self.fail("outcomes", f"ledger call {row['id']} ({row['tool']}, "
                          f"{row['price_atoms']} atoms): no traceable outcome stored "
                          f"({(outcome or 'none')[:120]})")
                continue
            tool, tag, run_id = m.groups()
            completed.append((tag, tool, row["price_atoms"]))
            charged.setdefault(tag, []).append((row["id"], run_id, row["finished_at"]))
            if run_id not in delivered.get(tag, set()):
                got = sorted(delivered.get(tag, set()))
                self.fail("outcomes", f"paid outcome lost: ledger call {row['id']} {tool} {tag} "
                          f"run={run_id}, {row['price_atoms']} atoms, key {row['call_key']}, "
                          f"completed at {time.strftime('%H:%M:%S', time.localtime(row['finished_at'] or 0))}; "
                          f"the agent got {('run(s) ' + ', '.join(got)) if got else 'no result'}; "
                          f"its attempts: {seen.get(tag, [])[:6]}")
        s.completed = len(completed)
        # Check 3: one charge per tag, and no execution after the charge completed.
        for tag, rows in charged.items():
            if len(rows) > 1:
                self.fail("once", f"{tag} charged {len(rows)} times: ledger calls "
                          f"{', '.join(f'{i} (run={r})' for i, r, _ in rows)}")
            first_done = min(f or 0 for _, _, f in rows)
            later = [r for r in runs if r["event"] == "start" and r["tag"] == tag
                     and r["t"] > first_done + 1]
            if later:
                self.fail("once", f"{tag} ran again after its charge completed: run(s) "
                          f"{', '.join(r['run'] for r in later)}")
        starts = {}
        for r in runs:
            if r["event"] == "start":
                starts.setdefault(r["tag"], []).append(r["run"])
        s.executions = sum(len(v) for v in starts.values())
        s.reexecuted = sum(1 for v in starts.values() if len(v) > 1)
        # A result for a paid tool that no completed charge paid for: the bot gave it away.
        paid_runs = {run for rows in charged.values() for _, run, _ in rows}
        tool_of = {r["tag"]: r["tool"] for r in records if r["event"] == "start"}
        for tag, got in delivered.items():
            tool = tool_of.get(tag)
            if PRICES.get(tool, 0) > 0:
                for run_id in got - paid_runs:
                    self.fail("once", f"{tag} ({tool}) delivered run={run_id}, which no completed "
                              "charge at the bot paid for")
        return completed

    def check_credit(self, spend, completed, s):
        # Pending payments count as the agent's: one may have been paid, and the spend log
        # may have settled another agent's payment of the same amount in its place.
        paid = dict(spend.execute("SELECT agent, coalesce(sum(atoms), 0) FROM spend WHERE status "
                                  "IN ('paid', 'pending') AND bot = ? GROUP BY agent",
                                  (self.alice,)).fetchall())
        charged = {}
        for tag, _, price in completed:
            agent = tag.split("-")[0]
            charged[agent] = charged.get(agent, 0) + price
        s.per_agent = {a["name"]: (paid.get(a["name"], 0), charged.get(a["name"], 0))
                       for a in self.agents}
        for other in set(paid) - {a["name"] for a in self.agents}:
            self.fail("credit", f"agent {other!r}, not one of the soak's, paid {paid[other]} atoms")
        for name, (p, c) in s.per_agent.items():
            if c > p:
                self.fail("credit", f"{name} was charged {c} atoms for its completed calls and "
                          f"paid {p}: {c - p} atoms of another agent's credit")

    def check_agents(self, records, s):
        started = {r["tag"]: r for r in records if r["event"] == "start"}
        finals = {r["tag"]: r for r in records if r["event"] == "call"}
        attempts = [r for r in records if r["event"] == "attempt"]
        s.calls = len(started)
        s.paid_calls = sum(1 for r in started.values() if PRICES[r["tool"]] > 0)
        s.delivered = sum(1 for r in finals.values() if r["final"] == "delivered")
        s.gave_up = sum(1 for r in finals.values() if r["final"] == "gave_up")
        s.attempts = len(attempts)
        s.retries = len(attempts) - len({r["tag"] for r in attempts})
        s.errors = {}
        for r in attempts:
            if r["kind"] != "result":
                s.errors[r["kind"]] = s.errors.get(r["kind"], 0) + 1
        for tag, r in started.items():
            final = finals.get(tag)
            if final is None:
                self.fail("agents", f"{tag} ({r['tool']}) never finished at its agent")
            elif final["final"] != "delivered":
                self.fail("agents", f"{tag} ({r['tool']}) got no result by the end of the drain "
                          f"after {final['attempts']} attempt(s)")
        for r in attempts:
            for text in r.get("texts") or []:
                if RAW_PAYMENT_REQUIRED.search(text):
                    self.fail("agents", f"{r['tag']} attempt {r['attempt']}: the agent was shown "
                              f"the bot's raw payment_required: {text[:160]}")
                if r["kind"] == "result":
                    for m in ANSWER.finditer(text):
                        if m.group(2) != r["tag"]:
                            self.fail("agents", f"{r['tag']} got another call's answer: {text[:160]}")

    def check_faults(self, records, s):
        paid_attempts = [(r["t0"], r["t1"]) for r in records if r["event"] == "attempt"
                         and PRICES.get(r["tool"], 0) > 0 and "t1" in r]
        s.kills_in_paid = {}
        for t, target, _ in self.kills:
            if any(t0 <= t <= t1 for t0, t1 in paid_attempts):
                s.kills_in_paid[target] = s.kills_in_paid.get(target, 0) + 1
        if not self.kills:
            self.fail("faults", "no process was killed: the run proves nothing (raise --secs)")
        elif not s.kills_in_paid:
            self.fail("faults", "no kill fell during a paid call: the run proves little")
        # Each bridge kill aimed at paid calls in flight: their results reached their agents.
        delivered = {}
        for r in records:
            if r["event"] == "attempt" and r["kind"] == "result":
                for text in r.get("texts") or []:
                    for m in ANSWER.finditer(text):
                        if m.group(2) == r["tag"]:
                            delivered.setdefault(r["tag"], m.group(3))
        s.aimed = []
        for t, tags in getattr(self.soak, "aimed", []):
            when = time.strftime("%H:%M:%S", time.localtime(t))
            if not tags:
                # Reported, not failed: whether a paid call is in flight at the bridge
                # depends on the agents' pace; a kill that did cut one is checked below.
                print(f"  note: the bridge kill at {when} found no paid call in flight to aim at")
            for tag in tags:
                s.aimed.append((tag, delivered.get(tag)))
                if tag not in delivered:
                    self.fail("faults", f"{tag}, a paid call in flight at the bridge kill at "
                              f"{when}: its result never reached its agent")


def report(soak, s):
    kills = {}
    for _, target, how in soak.kills:
        kills.setdefault(target, {}).setdefault(how, 0)
        kills[target][how] += 1
    m = s.money
    print()
    print(f"soak seed {soak.opts.seed}, faults {soak.opts.secs} s, {soak.opts.agents} agent(s)")
    print(f"  kills: {len(soak.kills)}: "
          + "; ".join(f"{t} " + ", ".join(f"{n}x {h}" for h, n in hs.items())
                      for t, hs in sorted(kills.items())))
    print(f"  kills during a paid call: {sum(s.kills_in_paid.values())}"
          + "".join(f", {t} {n}" for t, n in sorted(s.kills_in_paid.items())))
    print("  bridge kills aimed at paid calls: "
          + (", ".join(f"{tag} " + (f"delivered run={run}" if run else "NOT delivered")
                       for tag, run in s.aimed) or "none"))
    print(f"  starts: devnet {soak.devnet.starts}, serve {soak.serve.starts}, bridge {soak.bridge.starts}")
    print(f"  calls: {s.calls} started ({s.paid_calls} paid), {s.delivered} delivered, "
          f"{s.gave_up} gave up; {s.attempts} attempts, {s.retries} retries; failed attempts "
          + (", ".join(f"{k} {v}" for k, v in sorted(s.errors.items())) or "none"))
    print(f"  upstream: {s.executions} executions, {s.reexecuted} tag(s) run more than once")
    print(f"  bridge paid: {m['paid_n']} tips, {m['paid']} atoms ({m['pending_n']} pending, "
          f"{m['failed_n']} failed)")
    print(f"  bot credited: {m['tips_n']} tips, {m['tips']:g} atoms = completed charges "
          f"{m['completed']} ({m['completed_n']} calls) + balance {m['balance']:g}"
          + (f" (reserved {m['reserved']:g})" if m["reserved"] is not None else "")
          + f"; {m['refunded_n']} refunded, {m['charged_pending_n']} pending")
    print(f"  paid outcomes at the bot: {s.completed} completed")
    print("  per agent (paid or pending / charged atoms): "
          + ", ".join(f"{n} {p}/{c}" for n, (p, c) in s.per_agent.items()))
    names = [("money", "1 money conserved"), ("outcomes", "2 paid outcomes delivered"),
             ("once", "3 charged and run once"), ("credit", "4 credit stays its payer's"),
             ("agents", "5 agents answered"), ("faults", "6 faults hit paid calls")]
    for key, name in names:
        n = sum(1 for check, _ in soak.failures if check == key)
        print(f"  check {name}: " + (f"FAILED ({n})" if n else "ok"))
    if soak.failures:
        print(f"FAILED: {len(soak.failures)} violation(s)")
        for check, what in soak.failures:
            print(f"  [{check}] {what}")
    else:
        print("PASSED: money conserved, every paid outcome reached its agent, nothing charged twice")
