-- The brmcp ledger, schema version 5 (`PRAGMA user_version`).
-- Amounts: `matoms` milliatoms, `*_atoms` atoms. Times: unix seconds. Callers: a
-- Bison Relay uid as 64 lowercase hex characters. Tables are STRICT so a wrong type is an
-- error, not a silent conversion.

-- One row per caller ever credited.
CREATE TABLE balances (
    caller TEXT PRIMARY KEY NOT NULL,
    matoms INTEGER NOT NULL CHECK (matoms >= 0)
) STRICT, WITHOUT ROWID;

-- Every tip received, credited or not. A tip is identified by its sequence id, its
-- caller and its amount: a redelivery matches a row not yet cleared (the client has not
-- confirmed clearing its id), or a cleared one within the replay window
-- (TIP_REPLAY_WINDOW_SECS); the same id with another caller or amount, or past the
-- window (the client's logs were reset and ids start over), is a new tip.
CREATE TABLE tips (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The u64 sequence id stored bit for bit as a signed integer (ids above
    -- 2^63 - 1 read as negative in the sqlite3 shell but round-trip exactly).
    seq INTEGER NOT NULL,
    caller TEXT NOT NULL,
    matoms INTEGER NOT NULL CHECK (matoms >= 0),
    credited INTEGER NOT NULL CHECK (credited IN (0, 1)),
    received_at INTEGER NOT NULL,
    -- 1 once the client confirmed clearing this id: it is never redelivered.
    cleared INTEGER NOT NULL DEFAULT 0 CHECK (cleared IN (0, 1))
) STRICT;

CREATE INDEX tips_uncleared ON tips (seq) WHERE cleared = 0;

-- The paid-call journal: one row per charge.
CREATE TABLE calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT, -- AUTOINCREMENT: an id is never reused
    caller TEXT NOT NULL,
    tool TEXT NOT NULL,
    price_atoms INTEGER NOT NULL CHECK (price_atoms >= 0),
    state TEXT NOT NULL CHECK (state IN ('pending', 'completed', 'refunded')),
    started_at INTEGER NOT NULL,
    finished_at INTEGER,
    reason TEXT,                -- why it was refunded
    call_key TEXT,              -- NULL for an unkeyed call; kept for the record
    args_hash BLOB,             -- SHA-256 of the canonical arguments, while the key is held
    -- 1 while the key blocks another run: pending, or finished and replayable.
    key_held INTEGER NOT NULL DEFAULT 0 CHECK (key_held IN (0, 1)),
    outcome TEXT,               -- the tool result JSON replayed for the key, while held
    replay_until INTEGER,       -- the key is released at this time
    -- Where the caller waits for the answer: its session id and its request's JSON-RPC
    -- id (as JSON); NULL when unknown.
    session TEXT,
    request_id TEXT,
    -- 1 from the refund at open of a call a dead process left pending until its caller
    -- is told (a CALL_INTERRUPTED answer on its session).
    notify INTEGER NOT NULL DEFAULT 0 CHECK (notify IN (0, 1)),
    CHECK (key_held = 0 OR call_key IS NOT NULL)
) STRICT;

CREATE UNIQUE INDEX calls_by_key ON calls (caller, call_key) WHERE key_held = 1;
CREATE INDEX calls_by_caller ON calls (caller, id);
CREATE INDEX calls_pending ON calls (id) WHERE state = 'pending';
CREATE INDEX calls_replay_until ON calls (replay_until) WHERE key_held = 1;
CREATE INDEX calls_notify ON calls (id) WHERE notify = 1;
-- The rows pruning may drop (see retention.rs); also made at open for older files.
CREATE INDEX calls_prunable ON calls (caller, id) WHERE key_held = 0 AND state != 'pending';
-- The outcomes kept for replay, which bounding them reads (see ledger.rs).
CREATE INDEX calls_outcomes ON calls (caller, id) WHERE key_held = 1 AND outcome IS NOT NULL;

-- Per caller, the calls pruned from the journal (past its per-caller row bound), so the
-- money they record stays counted: completed calls kept their price.
CREATE TABLE pruned (
    caller TEXT PRIMARY KEY NOT NULL,
    completed INTEGER NOT NULL CHECK (completed >= 0),
    completed_atoms INTEGER NOT NULL CHECK (completed_atoms >= 0),
    refunded INTEGER NOT NULL CHECK (refunded >= 0)
) STRICT, WITHOUT ROWID;

-- Keyed calls refused `payment_required` that wait for their caller's tip, and the
-- credit a tip reserved for each (part of the caller's balance only that call may
-- spend), oldest first by id. A row goes when its call is charged or at expires_at.
CREATE TABLE waiting (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    caller TEXT NOT NULL,
    call_key TEXT NOT NULL,
    tool TEXT NOT NULL,
    args_hash BLOB NOT NULL,
    price_atoms INTEGER NOT NULL CHECK (price_atoms >= 0),
    refused_at INTEGER NOT NULL,
    reserved_matoms INTEGER NOT NULL DEFAULT 0 CHECK (reserved_matoms >= 0),
    expires_at INTEGER NOT NULL,
    -- The caller's event order: its latest refusal, and the tip that reserved for it.
    refused_seq INTEGER NOT NULL DEFAULT 0,
    reserved_seq INTEGER NOT NULL DEFAULT 0,
    UNIQUE (caller, call_key)
) STRICT;

CREATE INDEX waiting_expires ON waiting (expires_at);

-- Operator actions on money.
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    caller TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('credit', 'refund')),
    matoms INTEGER NOT NULL CHECK (matoms >= 0),
    call_id INTEGER REFERENCES calls (id), -- the call a refund returned
    reason TEXT NOT NULL
) STRICT;
