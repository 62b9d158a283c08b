"""Full-text search at scale (issue 29): a node's store filled with
``--messages`` (1,000,000) messages over 200 rooms and 500 participants, on
SQLite and on PostgreSQL; the background indexer's time to index them, the
index's size per message, search latency over HTTP for a member of 20
rooms, and send throughput with the index against without.

    python bench/bench_search.py                          # 1M messages, both stores
    python bench/bench_search.py --messages 100000        # quick
    python bench/bench_search.py --stores sqlite --runs 5 --repeat 50
    python bench/bench_search.py --only sends             # send throughput only

For each store (``--stores``), in a temporary folder:

1. **fill**: ``python -m quart_mesh serve`` makes the mesh (``/api/setup/init``,
   the owner) and registers ``searcher``; the node is stopped, then the
   conductor writes 498 more participants, 200 rooms and their members with
   the store's own functions, and the messages with batched SQL (SQLite:
   ``executemany``; PostgreSQL: ``COPY``) into the migrated database, the
   index left pending (``search_index.pending_below`` = the newest cursor):
   as an upgrade to migration 0027 finds a mesh.
2. **backfill**: the node's own background indexer
   (``Search.run_indexer``, batches of 2,000 newest first with its 10 ms
   pause between them) indexes them, timed, in the conductor's process with
   no other load; then the index's size (SQLite: the FTS5 shadow tables'
   pages from ``dbstat``; PostgreSQL: the GIN index and the
   ``search_vector`` column, after ``VACUUM``).
3. **search**: the node is served again (``python -m quart_mesh serve`` on
   loopback, ``MESH_RATE_LIMITS=off``); a client process of this script
   (``--client``) sends ``GET /api/search`` one at a time on one keep-alive
   connection as ``searcher``, a member of 20 rooms: every query of the set
   ``--repeat`` times per run, shuffled, ``--runs`` runs. Per class of query:
   p50/p95/p99 of each run, medians over runs; the client's CPU and the
   server's (node + PostgreSQL) CPU per query.

Then **sends** (``--only sends``, or after the above): fresh empty nodes,
``bench/_search_node.py index`` (the node as shipped) against
``bench/_search_node.py noindex`` (the same node with the store's index
writes patched to no-ops inside the server process; on PostgreSQL its GIN
index also dropped), runs interleaved; ``--senders`` WebSocket senders with
``--window`` sends in flight each, chat-like content, a send counted at its
echo; and REST posts. Load from a client process of this script.

Messages: words drawn from a Zipf distribution (exponent 1.07) over a
vocabulary of 6,000 words (the 100 commonest English words, then
pronounceable made-up words), lengths log-normal (median 7 words, 1 to 80),
a capital and a full stop or question mark as people type; 5 % are replies
in a thread, 1 % carry a file; rooms' activity Zipf-like; the sender a
member of the room. All from ``--seed`` (1).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import random
import resource
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common
from _common import ROOT, ServerProcess, command_line, median, percentile, raise_fd_limit, spawn

sys.path.insert(0, str(ROOT))

TICKS = os.sysconf("SC_CLK_TCK")
PASSWORD = "bench passphrase"
MODES = ("index", "noindex")
ROOMS = 200
PARTICIPANTS = 500  # the owner, searcher and 498 more
SEARCHER_ROOMS = 20
THREAD_SHARE = 0.05
FILE_SHARE = 0.01

# --------------------------------------------------------------------------
# the corpus

COMMON_ENGLISH = (  # noqa: SIM905 (a list of words, as words)
    "the be to of and a in that have i it for not on with he as you do at this but"
    " his by from they we say her she or an will my one all would there their what so"
    " up out if about who get which go me when make can like time no just him know"
    " take people into year your good some could them see other than then now look"
    " only come its over think also back after use two how our work first well way"
    " even new want because any these give day most us is are was were been has had"
    " did said"
).split()
_ONSETS = "b c d f g h j k l m n p r s t v w y z br cl cr dr fl gr pl pr sh st th tr ch".split()  # noqa: SIM905
_VOWELS = "a e i o u a e i o ai ea ou".split()  # noqa: SIM905
_CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ck", "ng"]


def vocabulary(size: int, rng: random.Random) -> list[str]:
    """The commonest English words, then made-up pronounceable ones (rank order)."""
    words = list(dict.fromkeys(COMMON_ENGLISH))
    seen = set(words)
    while len(words) < size:
        syllables = rng.choice((1, 2, 2, 2, 3, 3, 4))
        word = "".join(
            rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)
        )
        if word not in seen and len(word) > 2:
            seen.add(word)
            words.append(word)
    return words


class Corpus:
    """Chat-like message texts from a fixed seed."""

    def __init__(self, seed: int, vocab_size: int = 6000, exponent: float = 1.07) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(vocab_size, random.Random(seed + 1))
        weights = [1 / (rank**exponent) for rank in range(1, len(self.words) + 1)]
        self.cum = list(itertools.accumulate(weights))

    def lengths(self, n: int) -> list[int]:
        return [max(1, min(80, round(math.exp(self.rng.gauss(1.95, 0.75))))) for _ in range(n)]

    def texts(self, n: int) -> tuple[list[str], list[list[str]]]:
        """*n* messages: (their texts, their words)."""
        lengths = self.lengths(n)
        drawn = self.rng.choices(self.words, cum_weights=self.cum, k=sum(lengths))
        texts: list[str] = []
        tokens: list[list[str]] = []
        at = 0
        ends = (".", ".", "", "", "?", "!")
        for length in lengths:
            words = drawn[at : at + length]
            at += length
            tokens.append(words)
            text = " ".join(words)
            texts.append(text[:1].upper() + text[1:] + self.rng.choice(ends))
        return texts, tokens


# --------------------------------------------------------------------------
# processes: the node, PostgreSQL's CPU


def node_env(database_url: str | None) -> dict[str, str]:
    env = {
        **os.environ,
        "MESH_RATE_LIMITS": "off",  # the benchmarks measure throughput
        "MESH_SUBSCRIBER_BUFFER": "4096",
        "MESH_LOG_LEVEL": "INFO",  # the "listening on" line is logged at INFO
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("MESH_DATABASE_URL", None)
    if database_url:
        env["MESH_DATABASE_URL"] = database_url
    return env


def start_node(data_dir: Path, database_url: str | None, mode: str = "index") -> ServerProcess:
    """``bench/_search_node.py MODE serve ...``: ``index`` is ``python -m quart_mesh serve``."""
    args = [sys.executable, str(ROOT / "bench" / "_search_node.py"), mode]
    args += ["--port", "0", "--data-dir", str(data_dir)]
    return spawn(args, node_env(database_url))


def proc_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def postgres_cpu(pg_data: Path | None) -> float:
    """CPU seconds of the PostgreSQL server and its children now (0 without one)."""
    if pg_data is None:
        return 0.0
    try:
        master = int((pg_data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    total = proc_cpu(master)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == master:
                total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --------------------------------------------------------------------------
# 1. the fill


@dataclass
class Filled:
    messages: int
    seconds: float
    searcher_id: str
    searcher_token: str
    searcher_rooms: list[str]  # names
    readable: int  # messages in the searcher's rooms
    df: Counter[str]  # messages containing each word (all rooms)
    df_readable: Counter[str]  # the same, in the searcher's rooms
    bigrams: Counter[tuple[str, str]]  # adjacent pairs in the searcher's rooms (a sample)
    senders: Counter[str]  # messages per sender name in the searcher's rooms
    words: list[str] = field(default_factory=list)
    room_messages: dict[str, int] = field(default_factory=dict)  # in the searcher's rooms


def make_mesh(data_dir: Path, database_url: str | None) -> str:
    """Start the node once: the owner (setup) and ``searcher``; the token."""
    import httpx

    server = start_node(data_dir, database_url)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            r = http.post(
                "/api/setup/init",
                json={"name": "owner", "password": PASSWORD, "meshName": "bench"},
            )
            r.raise_for_status()
            r = http.post("/api/auth/register", json={"name": "searcher", "password": PASSWORD})
            r.raise_for_status()
            token: str = r.json()["token"]
    finally:
        server.stop()
    return token


def fill(url: str, token: str, count: int, seed: int) -> Filled:
    """Participants, rooms and members with the store's functions; *count*
    messages (and attachments) with batched SQL; the index left pending."""
    import sqlalchemy as sa

    from quart_mesh.records import Participant, Room, now_ms
    from quart_mesh.store import accounts, rooms
    from quart_mesh.store.schema import uploads

    started = time.monotonic()
    rng = random.Random(seed)
    corpus = Corpus(seed)
    engine = sa.create_engine(url)
    now = now_ms()
    postgresql = url.startswith("postgresql")
    try:
        with engine.begin() as conn:
            searcher = accounts.get_participant_by_name(conn, "searcher")
            assert searcher is not None
            searcher_id = searcher[0].participant_id
            people: list[tuple[str, str]] = [(searcher_id, "searcher")]
            for i in range(PARTICIPANTS - 2):
                pid = f"01BENCHP{i:018d}"
                name = f"p{i:03d}"
                accounts.insert_participant(
                    conn, Participant(pid, name, "human", "human", "member", now), None
                )
                people.append((pid, name))
            room_ids = [f"01BENCHR{i:018d}" for i in range(ROOMS)]
            for i, room_id in enumerate(room_ids):
                rooms.insert_room(conn, Room(room_id, "room", f"room-{i:03d}", "", None, now))
            # members: searcher in 20 rooms, everyone else in 5 to 40
            mine = set(rng.sample(range(ROOMS), SEARCHER_ROOMS))
            members: dict[int, list[tuple[str, str]]] = {i: [] for i in range(ROOMS)}
            for who in people:
                chosen = (
                    mine if who[0] == searcher_id else rng.sample(range(ROOMS), rng.randint(5, 40))
                )
                for i in chosen:
                    members[i].append(who)
            conn.execute(
                sa.text(
                    "INSERT INTO room_members (room_id, participant_id, joined_at, hidden)"
                    " VALUES (:room_id, :pid, :at, FALSE)"
                ),
                [
                    {"room_id": room_ids[i], "pid": pid, "at": now}
                    for i, whos in members.items()
                    for pid, _ in whos
                ],
            )
            files = int(count * FILE_SHARE) + 1
            conn.execute(
                uploads.insert(),
                [
                    {
                        "upload_id": f"01BENCHU{i:018d}",
                        "stored_name": f"01benchu{i:018d}.png",
                        "filename": f"picture-{i}.png",
                        "content_type": "image/png",
                        "size": 1000,
                        "uploader_id": searcher_id,
                        "created_at": now,
                    }
                    for i in range(files)
                ],
            )
        # the messages: rooms' activity Zipf-like, a year of history
        room_cum = list(itertools.accumulate(1 / (i + 1) ** 0.8 for i in range(ROOMS)))
        span = 365 * 86_400_000
        first_at = now - span
        df: Counter[str] = Counter()
        df_readable: Counter[str] = Counter()
        bigrams: Counter[tuple[str, str]] = Counter()
        senders: Counter[str] = Counter()
        room_counts: Counter[int] = Counter()
        recent: dict[int, list[str]] = {i: [] for i in range(ROOMS)}
        upload_at = 0
        batch = 50_000
        raw = engine.raw_connection()
        try:
            driver: Any = raw.driver_connection
            if not postgresql:
                driver.execute("PRAGMA synchronous=OFF")
                driver.execute("PRAGMA cache_size=-200000")
            columns = "message_id, room_id, sender_id, sender_name, content, thread_id, created_at"
            for start in range(0, count, batch):
                n = min(batch, count - start)
                texts, tokens = corpus.texts(n)
                picks = rng.choices(range(ROOMS), cum_weights=room_cum, k=n)
                rows: list[tuple[Any, ...]] = []
                attached: list[tuple[str, int, str]] = []
                for j in range(n):
                    seq = start + j
                    room = picks[j]
                    message_id = f"01BENCHM{seq:018d}"
                    sender_id, sender_name = rng.choice(members[room])
                    thread = None
                    if recent[room] and rng.random() < THREAD_SHARE:
                        thread = rng.choice(recent[room])
                    else:
                        recent[room].append(message_id)
                        if len(recent[room]) > 50:
                            del recent[room][0]
                    rows.append(
                        (
                            message_id,
                            room_ids[room],
                            sender_id,
                            sender_name,
                            texts[j],
                            thread,
                            first_at + span * seq // count,
                        )
                    )
                    if rng.random() < FILE_SHARE and upload_at < files:
                        attached.append((message_id, 0, f"01BENCHU{upload_at:018d}"))
                        upload_at += 1
                    unique = set(tokens[j])
                    df.update(unique)
                    if room in mine:
                        df_readable.update(unique)
                        senders[sender_name] += 1
                        room_counts[room] += 1
                        if j % 4 == 0:
                            words = tokens[j]
                            bigrams.update(itertools.pairwise(words))
                if postgresql:
                    with driver.cursor() as cur:
                        with cur.copy(f"COPY messages ({columns}) FROM STDIN") as copy:
                            for row in rows:
                                copy.write_row(row)
                        with cur.copy(
                            "COPY message_attachments (message_id, position, upload_id) FROM STDIN"
                        ) as copy:
                            for row in attached:
                                copy.write_row(row)
                else:
                    driver.executemany(
                        f"INSERT INTO messages ({columns}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows
                    )
                    driver.executemany(
                        "INSERT INTO message_attachments (message_id, position, upload_id)"
                        " VALUES (?, ?, ?)",
                        attached,
                    )
                driver.commit()
                print(
                    f"  filled {start + n:,} messages ({time.monotonic() - started:.0f} s)",
                    flush=True,
                )
            # the index left pending, as migration 0027 leaves it on an existing mesh
            cur = driver.cursor()
            cur.execute(
                "UPDATE search_index SET pending_below = (SELECT max(seq) FROM messages)"
                " WHERE id = 1"
            )
            driver.commit()
            if postgresql:
                driver.autocommit = True
                driver.execute("VACUUM ANALYZE")
            else:
                driver.execute("ANALYZE")
                driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                driver.commit()
        finally:
            raw.close()
    finally:
        engine.dispose()
    return Filled(
        messages=count,
        seconds=time.monotonic() - started,
        searcher_id=searcher_id,
        searcher_token=token,
        searcher_rooms=sorted(f"room-{i:03d}" for i in mine),
        readable=sum(room_counts.values()),
        df=df,
        df_readable=df_readable,
        bigrams=bigrams,
        senders=senders,
        words=corpus.words,
        room_messages={f"room-{i:03d}": room_counts[i] for i in mine},
    )


# --------------------------------------------------------------------------
# 2. the backfill and the index's size


def descending_backfill(conn: Any, batch: int) -> tuple[int, bool]:
    """``store.search.backfill`` as it was before this benchmark found it
    slow (``--indexer descending``, for comparison; never the default): each
    batch written to the index newest first. FTS5 flushes its in-memory
    segment whenever a rowid below the last one written comes, so that order
    makes every row a segment of its own (then merged again and again); the
    shipped backfill writes each batch in ascending order."""
    import sqlalchemy as sa

    from quart_mesh.search_text import fold
    from quart_mesh.store.schema import messages, search_index

    if conn.dialect.name == "postgresql":  # nothing to change there
        shipped: tuple[int, bool] = SHIPPED_BACKFILL(conn, batch)
        return shipped
    below = conn.execute(
        sa.select(search_index.c.pending_below).where(search_index.c.id == 1)
    ).scalar()
    if below is None:
        return 0, False
    rows = list(
        conn.execute(
            sa.select(messages.c.seq, messages.c.content)
            .where(messages.c.seq <= below)
            .order_by(messages.c.seq.desc())
            .limit(batch)
        )
    )
    if rows:
        conn.execute(
            sa.text("INSERT OR REPLACE INTO message_search (rowid, body) VALUES (:seq, :body)"),
            [{"seq": r.seq, "body": fold(r.content)} for r in rows],
        )
    left = len(rows) == batch
    conn.execute(
        search_index.update()
        .where(search_index.c.id == 1)
        .values(pending_below=rows[-1].seq - 1 if left else None)
    )
    return len(rows), left


def _shipped() -> Any:
    from quart_mesh.store import search as repo

    return repo.backfill


SHIPPED_BACKFILL = _shipped()


async def backfill(
    url: str, pg_data: Path | None, variant: str, cap: float | None
) -> dict[str, Any]:
    """Run the node's background indexer (``Search.run_indexer``) until done
    or *cap* seconds; its wall and CPU time, and its progress per batch. The
    *variant* ``descending`` swaps in :func:`descending_backfill`."""
    import trio

    from quart_mesh.config import Limits
    from quart_mesh.services.search import Search
    from quart_mesh.store import Database
    from quart_mesh.store import search as repo

    inner = descending_backfill if variant == "descending" else SHIPPED_BACKFILL
    progress: list[tuple[float, int]] = []

    def counted(conn: Any, batch: int) -> tuple[int, bool]:
        indexed, more = inner(conn, batch)
        progress.append((time.monotonic(), indexed))
        return indexed, more

    repo.backfill = counted
    db = Database(url)
    await db.open()
    try:
        pending = await db.read(repo.pending_count)
        cpu0, pg0, t0 = self_cpu(), postgres_cpu(pg_data), time.monotonic()
        with trio.move_on_after(cap if cap else math.inf):
            await Search(db, Limits()).run_indexer()
        elapsed = time.monotonic() - t0
        cpu1, pg1 = self_cpu(), postgres_cpu(pg_data)
        left = await db.read(repo.pending_count)
    finally:
        repo.backfill = SHIPPED_BACKFILL
        await db.close()
    done = sum(n for _, n in progress)
    # the rate over the last minute (or the last tenth of the run, if shorter)
    tail = max(60.0, elapsed / 10) if elapsed > 120 else elapsed
    recent = [(t, n) for t, n in progress if t >= t0 + elapsed - tail]
    return {
        "variant": variant,
        "pending": pending,
        "indexed": done,
        "left": left,
        "seconds": elapsed,
        "cpu": cpu1 - cpu0,
        "pg_cpu": pg1 - pg0,
        "recent_rate": sum(n for _, n in recent) / tail if recent else 0.0,
        "tail": tail,
    }


def backfill_line(done: dict[str, Any], pg: bool) -> str:
    if done["variant"] == "shipped" or pg:  # the order changes nothing on PostgreSQL
        label = "Search.run_indexer as shipped"
    else:
        label = "Search.run_indexer, batches written newest first (before the fix)"
    line = (
        f"backfill ({label}): {done['indexed']:,} of {done['pending']:,} messages in "
        f"{done['seconds']:.1f} s ({done['indexed'] / done['seconds']:,.0f}/s"
    )
    if done["left"]:
        line += f"; {done['recent_rate']:,.0f}/s over the last {done['tail']:.0f} s"
    line += f"); CPU: indexer process {done['cpu']:.1f} s"
    if pg:
        line += f", PostgreSQL {done['pg_cpu']:.1f} s"
    if done["left"]:
        line += f"; STOPPED at --backfill-cap with {done['left']:,} left"
    return line


def index_size(url: str, data_dir: Path, messages: int) -> dict[str, Any]:
    """The index's bytes: SQLite's FTS5 shadow tables (dbstat) and the whole
    file; PostgreSQL's GIN index and ``search_vector`` column."""
    if url.startswith("postgresql"):
        import psycopg

        conninfo = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(conninfo, autocommit=True) as pg:
            pg.execute("VACUUM ANALYZE messages")
            gin, column, table, total = pg.execute(
                "SELECT pg_relation_size('ix_messages_search_vector'),"
                " (SELECT sum(pg_column_size(search_vector)) FROM messages),"
                " pg_relation_size('messages'), pg_total_relation_size('messages')"
            ).fetchone() or (0, 0, 0, 0)
        return {
            "index_bytes": gin + column,
            "gin_bytes": gin,
            "column_bytes": column,
            "table_bytes": table,
            "total_bytes": total,
            "per_message": (gin + column) / messages,
        }
    path = data_dir / "mesh.db"
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows: dict[str, int] = dict(
            conn.execute(
                "SELECT name, sum(pgsize) FROM dbstat WHERE name LIKE 'message_search%'"
                " GROUP BY name"
            ).fetchall()
        )
        messages_bytes = conn.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name = 'messages'"
        ).fetchone()[0]
    finally:
        conn.close()
    fts = sum(rows.values())
    return {
        "index_bytes": fts,
        "shadow": rows,
        "table_bytes": messages_bytes,
        "total_bytes": path.stat().st_size,
        "per_message": fts / messages,
    }


# --------------------------------------------------------------------------
# 3. search latency


@dataclass(frozen=True)
class Probe:
    kind: str  # one-word, two-word, phrase, prefix, filtered
    label: str
    params: dict[str, str]


def pick(shares: dict[str, float], share: float, avoid: set[str]) -> str:
    """The word whose share of messages is nearest *share* (in log terms)."""
    return min(
        (w for w in shares if w not in avoid and len(w) > 2),
        key=lambda w: abs(math.log(shares[w]) - math.log(share)),
    )


def probes(filled: Filled) -> tuple[list[Probe], dict[str, str]]:
    """The query set, and a note on each word's frequency."""
    n = filled.messages
    shares = {w: c / n for w, c in filled.df.items()}
    avoid = {"and", "not", "or"}
    common = pick(shares, 0.10, avoid)
    avoid.add(common)
    common2 = pick(shares, 0.05, avoid)
    avoid.add(common2)
    medium = pick(shares, 0.005, avoid)
    avoid.add(medium)
    medium2 = pick(shares, 0.002, avoid)
    avoid.add(medium2)
    rare = pick(shares, 0.0002, avoid)
    avoid.add(rare)
    # phrases that occur: the commonest adjacent pair of two common words, and
    # a pair with a medium-frequency word in it
    pairs = filled.bigrams.most_common()
    phrase_common = next(p for p in pairs if p[0][0] != p[0][1])[0]
    phrase_medium = next(
        (
            p
            for p, c in pairs
            if c >= 3 and p[0] != p[1] and any(0.001 <= shares[w] <= 0.01 for w in p)
        ),
        pairs[len(pairs) // 50][0],
    )
    # a prefix of a medium word (several words share it) and a short common one
    prefix_medium = medium[:3]
    prefix_short = common[:2] if len(common) >= 2 else common
    room = max(filled.room_messages, key=lambda r: filled.room_messages[r])
    quiet_room = min(filled.room_messages, key=lambda r: filled.room_messages[r])
    sender = max((s for s in filled.senders if s != "searcher"), key=lambda s: filled.senders[s])
    out = [
        Probe("one-word", f"{common} (common)", {"q": common}),
        Probe("one-word", f"{medium} (medium)", {"q": medium}),
        Probe("one-word", f"{rare} (rare)", {"q": rare}),
        Probe("two-word", f"{common} {common2} (common+common)", {"q": f"{common} {common2}"}),
        Probe("two-word", f"{common} {medium} (common+medium)", {"q": f"{common} {medium}"}),
        Probe("two-word", f"{medium} {medium2} (medium+medium)", {"q": f"{medium} {medium2}"}),
        Probe(
            "phrase",
            f'"{phrase_common[0]} {phrase_common[1]}" (common pair)',
            {"q": f'"{phrase_common[0]} {phrase_common[1]}"'},
        ),
        Probe(
            "phrase",
            f'"{phrase_medium[0]} {phrase_medium[1]}" (pair with a medium word)',
            {"q": f'"{phrase_medium[0]} {phrase_medium[1]}"'},
        ),
        Probe("prefix", f"{prefix_medium}* (medium word's prefix)", {"q": f"{prefix_medium}*"}),
        Probe("prefix", f"{prefix_short}* (two letters)", {"q": f"{prefix_short}*"}),
        Probe("filtered", f"room:{room} {common}", {"q": f"room:{room} {common}"}),
        Probe("filtered", f"room:{quiet_room} {medium}", {"q": f"room:{quiet_room} {medium}"}),
        Probe("filtered", f"from:@{sender} {medium}", {"q": f"from:@{sender} {medium}"}),
        Probe("filtered", f"has:file {common}", {"q": f"has:file {common}"}),
        Probe("filtered", "has:file (no words)", {"q": "has:file"}),
        Probe("filtered", f"in:thread {medium}", {"q": f"in:thread {medium}"}),
        Probe("relevance", f"{common} sort=relevance", {"q": common, "sort": "relevance"}),
        Probe("relevance", f"{medium} sort=relevance", {"q": medium, "sort": "relevance"}),
    ]
    notes = {}
    for word, what in (
        (common, "common"),
        (common2, "common"),
        (medium, "medium"),
        (medium2, "medium"),
        (rare, "rare"),
    ):
        notes[word] = (
            f"{what}: rank {filled.words.index(word) + 1} of {len(filled.words)}, in "
            f"{filled.df[word]:,} messages ({100 * shares[word]:.3g} %), "
            f"{filled.df_readable[word]:,} of them in searcher's rooms"
        )
    for prefix in (prefix_medium, prefix_short):
        matching = [w for w in filled.df if w.startswith(prefix)]
        notes[prefix + "*"] = (
            f"prefix: {len(matching)} words begin with it, together in "
            f"{sum(filled.df[w] for w in matching):,} word-in-message occurrences"
        )
    notes[f"room:{room}"] = (
        f"searcher's busiest room: {filled.room_messages[room]:,} messages; "
        f"quietest room:{quiet_room} {filled.room_messages[quiet_room]:,}"
    )
    notes[f"from:@{sender}"] = f"{filled.senders[sender]:,} messages in searcher's rooms"
    return out, notes


def run_client(job: dict[str, Any]) -> dict[str, Any]:
    proc = _common.start_client(_common.python_client(__file__), job)
    assert proc.stdout is not None
    out = proc.stdout.read()
    if proc.wait() != 0 or not out.strip():
        raise RuntimeError(f"client failed: {out[-2000:]}")
    result: dict[str, Any] = json.loads(out)
    return result


def client_search(job: dict[str, Any]) -> dict[str, Any]:
    """One keep-alive connection, one request at a time: every probe
    ``repeat`` times per run, shuffled; latency of each, per run."""
    import httpx

    headers = {"Authorization": f"Bearer {job['token']}"}
    latencies: dict[str, list[list[float]]] = {p["label"]: [] for p in job["probes"]}
    hits: dict[str, int] = {}
    errors: list[str] = []
    rng = random.Random(0)
    cpu0 = time.process_time()
    with httpx.Client(base_url=job["url"], headers=headers, timeout=120) as http:
        for probe in job["probes"]:  # warm-up: each once; how many it finds
            r = http.get("/api/search", params={**probe["params"], "limit": "20"})
            if r.status_code != 200:
                errors.append(f"{probe['label']}: {r.status_code} {r.text[:200]}")
                hits[probe["label"]] = -1
            else:
                hits[probe["label"]] = len(r.json()["results"])
        cpu_start = time.process_time()
        t_start = time.monotonic()
        for _ in range(job["runs"]):
            for probe in job["probes"]:
                latencies[probe["label"]].append([])
            order = [p for p in job["probes"] for _ in range(job["repeat"])]
            rng.shuffle(order)
            for probe in order:
                t0 = time.perf_counter()
                r = http.get("/api/search", params={**probe["params"], "limit": "20"})
                elapsed = time.perf_counter() - t0
                if r.status_code != 200:
                    errors.append(f"{probe['label']}: {r.status_code} {r.text[:200]}")
                latencies[probe["label"]][-1].append(elapsed)
        wall = time.monotonic() - t_start
        cpu = time.process_time() - cpu_start
    del cpu0
    return {"latencies": latencies, "hits": hits, "errors": errors[:10], "cpu": cpu, "wall": wall}


def measure_search(
    data_dir: Path, url: str | None, pg_data: Path | None, filled: Filled, args: argparse.Namespace
) -> dict[str, Any]:
    server = start_node(data_dir, url)
    try:
        probe_list, notes = probes(filled)
        job = {
            "kind": "search",
            "url": server.url,
            "token": filled.searcher_token,
            "probes": [{"label": p.label, "params": p.params} for p in probe_list],
            "repeat": args.repeat,
            "runs": args.runs,
        }
        node0, pg0 = server.cpu_seconds(), postgres_cpu(pg_data)
        result = run_client(job)
        node1, pg1 = server.cpu_seconds(), postgres_cpu(pg_data)
    finally:
        server.stop()
    requests = len(probe_list) * (args.repeat * args.runs + 1)
    result["server_cpu_ms"] = (node1 - node0) / requests * 1e3
    result["pg_cpu_ms"] = (pg1 - pg0) / requests * 1e3
    result["probes"] = probe_list
    result["notes"] = notes
    return result


def explain_sqlite(data_dir: Path, filled: Filled) -> list[str]:
    """EXPLAIN QUERY PLAN of each probe's statement, as the store builds it
    (printed to show where the time goes)."""
    from quart_mesh.search_text import parse_query
    from quart_mesh.store import search as repo

    captured: list[str] = []
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{data_dir / 'mesh.db'}")
    try:
        probe_list, _ = probes(filled)
        with engine.connect() as conn:
            for probe in probe_list:
                query = parse_query(probe.params["q"])
                typed = query.filters
                room_ids = None
                if "room" in typed:
                    room_ids = (
                        conn.execute(
                            sa.text("SELECT room_id FROM rooms WHERE name = :n"),
                            {"n": typed["room"]},
                        ).scalar_one(),
                    )
                sender_id = None
                if "from" in typed:
                    sender_id = conn.execute(
                        sa.text("SELECT participant_id FROM participants WHERE name = :n"),
                        {"n": typed["from"].removeprefix("@")},
                    ).scalar_one()
                filters = repo.Filters(
                    room_ids=room_ids,
                    sender_id=sender_id,
                    in_thread="in" in typed,
                    has_file="has" in typed,
                )
                statements: list[tuple[str, dict[str, Any]]] = []

                def grab(
                    _c: Any,
                    _cur: Any,
                    sql: str,
                    params: Any,
                    *_a: Any,
                    into: list[tuple[str, dict[str, Any]]] = statements,
                ) -> None:
                    into.append((sql, params))

                sa.event.listen(conn, "before_cursor_execute", grab)

                repo.search(
                    conn,
                    filled.searcher_id,
                    (True, frozenset()),
                    query.terms,
                    filters,
                    relevance=probe.params.get("sort") == "relevance",
                    below=None,
                    offset=0,
                    limit=21,
                )
                sa.event.remove(conn, "before_cursor_execute", grab)
                sql, params = statements[-1]
                plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params).fetchall()
                captured.append(f"{probe.label}: " + "; ".join(str(row[-1]) for row in plan))
    finally:
        engine.dispose()
    return captured


# --------------------------------------------------------------------------
# sends with and without the index


async def client_sends_async(job: dict[str, Any]) -> dict[str, Any]:
    import httpx
    import trio
    from _common import RawWs, authenticate

    host, port = job["url"].removeprefix("http://").split(":")
    texts: list[str] = job["texts"]
    room = job["room"]
    counts = {"ws": 0, "rest": 0}
    errors: list[str] = []

    async def ws_sender(index: int, token: str) -> None:
        ws = await RawWs.connect(host, int(port))
        await authenticate(ws, token)
        marker = f"zq{index}x"
        mine = f" {marker}".encode()
        outstanding = trio.Semaphore(job["window"])

        async def acks() -> None:
            while True:
                for frame in await ws.receive_batch():
                    if b'"type":"message"' in frame and mine in frame:
                        counts["ws"] += 1
                        outstanding.release()
                    elif b'"type":"error"' in frame and len(errors) < 10:
                        errors.append(frame[:200].decode(errors="replace"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(acks)
            for i in itertools.count():
                await outstanding.acquire()
                text = texts[(index * 7919 + i) % len(texts)]
                await ws.send_text(
                    json.dumps(
                        {"type": "send_message", "roomId": room, "content": f"{text} {marker}"}
                    )
                )

    async def rest_sender(index: int, token: str, http: httpx.AsyncClient) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        for i in itertools.count():
            text = texts[(index * 7919 + i) % len(texts)]
            r = await http.post(
                f"/api/rooms/{room}/messages", json={"content": text}, headers=headers
            )
            if r.status_code == 201:
                counts["rest"] += 1
            elif len(errors) < 10:
                errors.append(r.text[:200])

    out: dict[str, Any] = {}
    cpu0 = time.process_time()
    for kind in ("ws", "rest"):
        limits = httpx.Limits(max_connections=len(job["tokens"]))
        async with (
            httpx.AsyncClient(base_url=job["url"], limits=limits, timeout=60) as http,
            trio.open_nursery() as nursery,
        ):
            for i, token in enumerate(job["tokens"]):
                if kind == "ws":
                    nursery.start_soon(ws_sender, i, token)
                else:
                    nursery.start_soon(rest_sender, i, token, http)
            await trio.sleep(job["warmup"])
            counts[kind], t0, c0 = 0, time.monotonic(), time.process_time()
            print(json.dumps({"mark": kind}), flush=True)
            await trio.sleep(job["seconds"])
            done, elapsed = counts[kind], time.monotonic() - t0
            print(json.dumps({"mark": kind + "_end"}), flush=True)
            out[kind] = done / elapsed
            out[kind + "_count"] = done
            out[kind + "_cpu"] = (time.process_time() - c0) / elapsed
            nursery.cancel_scope.cancel()
    out["cpu"] = time.process_time() - cpu0
    out["errors"] = errors
    return out


def start_send_node(store: str, mode: str, cluster: Any, folder: Path) -> tuple[Any, ...]:
    """A fresh node of *mode* (``index``, ``noindex``) on *store* in *folder*,
    with a mesh of senders: (server, mesh, PostgreSQL data folder)."""
    import trio

    data_dir = folder / mode
    url = cluster.url_for(data_dir) if store == "postgresql" else None
    if url is not None:
        # migrate first: the noindex build goes without the GIN index as well
        async def migrate() -> None:
            from quart_mesh.store import Database

            db = Database(url)
            await db.open()
            await db.close()

        trio.run(migrate)
        if mode == "noindex":
            import psycopg

            with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as c:
                c.execute("DROP INDEX ix_messages_search_vector")
    server = start_node(data_dir, url, mode)
    return server, None, cluster.folder / "data" if url else None


def send_window(
    server: ServerProcess,
    mesh: dict[str, Any],
    pg_data: Path | None,
    texts: list[str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One client process: WebSocket sends, then REST posts, ``--seconds``
    each; with the server's CPU (node + PostgreSQL) per send."""
    job = {
        "kind": "sends",
        "url": server.url,
        "room": mesh["room"],
        "tokens": mesh["senders"],
        "texts": texts,
        "window": args.window,
        "warmup": 0.5,
        "seconds": args.seconds,
    }
    proc = _common.start_client(_common.python_client(__file__), job)
    assert proc.stdout is not None
    marks: dict[str, float] = {}
    result: dict[str, Any] = {}
    for line in proc.stdout:
        data = json.loads(line)
        if "mark" in data:  # the server's CPU at the ends of each measured window
            marks[data["mark"]] = server.cpu_seconds() + postgres_cpu(pg_data)
        else:
            result = data
    if proc.wait() != 0 or not result:
        raise RuntimeError("the send client failed")
    for kind in ("ws", "rest"):
        used = marks[kind + "_end"] - marks[kind]
        result[kind + "_server_us"] = used / max(1, result[kind + "_count"]) * 1e6
    return result


# --------------------------------------------------------------------------
# the conductor


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def report_search(store: str, result: dict[str, Any], runs: int) -> None:
    probe_list: list[Probe] = result["probes"]
    lat: dict[str, list[list[float]]] = result["latencies"]
    print(f"\n{store}: search latency (ms), medians over {runs} runs of each run's percentile")
    print(f"{'query':<52}{'hits':>5}{'p50':>8}{'p95':>8}{'p99':>8}")
    for probe in probe_list:
        per_run = lat[probe.label]
        p50 = median([percentile(r, 50) for r in per_run])
        p95 = median([percentile(r, 95) for r in per_run])
        p99 = median([percentile(r, 99) for r in per_run])
        print(
            f"{probe.kind + ': ' + probe.label:<52}{result['hits'][probe.label]:>5}"
            f"{fmt_ms(p50):>8}{fmt_ms(p95):>8}{fmt_ms(p99):>8}"
        )
    print(f"{'class (all its queries pooled per run)':<52}{'':>5}{'p50':>8}{'p95':>8}{'p99':>8}")
    for kind in dict.fromkeys(p.kind for p in probe_list):
        pooled = [
            [x for p in probe_list if p.kind == kind for x in lat[p.label][run]]
            for run in range(runs)
        ]
        print(
            f"{kind:<52}{'':>5}{fmt_ms(median([percentile(r, 50) for r in pooled])):>8}"
            f"{fmt_ms(median([percentile(r, 95) for r in pooled])):>8}"
            f"{fmt_ms(median([percentile(r, 99) for r in pooled])):>8}"
        )
    count = sum(len(r) for v in lat.values() for r in v)
    print(
        f"server CPU per query: node {result['server_cpu_ms']:.1f} ms"
        + (f" + PostgreSQL {result['pg_cpu_ms']:.1f} ms" if result["pg_cpu_ms"] else "")
        + f"; client CPU {result['cpu'] / result['wall']:.2f} cores over {count} requests"
        f" ({result['cpu'] / count * 1e3:.2f} ms each)"
    )
    for note_key, note in result["notes"].items():
        print(f"  {note_key}: {note}")
    for error in result["errors"]:
        print(f"  ERROR {error}")


def size_line(size: dict[str, Any], messages: int) -> str:
    mb = 1 << 20
    if "gin_bytes" in size:
        return (
            f"GIN index {size['gin_bytes'] / mb:.1f} MiB + search_vector column "
            f"{size['column_bytes'] / mb:.1f} MiB = {size['per_message']:.0f} bytes per message "
            f"(messages table {size['table_bytes'] / mb:.0f} MiB, with indexes and TOAST "
            f"{size['total_bytes'] / mb:.0f} MiB)"
        )
    shadow = ", ".join(f"{k} {v / mb:.1f}" for k, v in sorted(size["shadow"].items()))
    return (
        f"FTS5 tables {size['index_bytes'] / mb:.1f} MiB = {size['per_message']:.0f} bytes per "
        f"message ({shadow} MiB); messages table {size['table_bytes'] / mb:.0f} MiB, "
        f"file {size['total_bytes'] / mb:.0f} MiB"
    )


def scale_store(store: str, cluster: Any, args: argparse.Namespace) -> None:
    import trio

    tmp = Path(tempfile.mkdtemp(prefix="bench-search-"))
    try:
        if os.geteuid() == 0 and cluster is not None:
            shutil.chown(tmp, "postgres")
        data_dir = tmp / "data"
        url = cluster.url_for(data_dir) if store == "postgresql" else None
        pg_data = cluster.folder / "data" if url else None
        store_url = url or f"sqlite:///{data_dir / 'mesh.db'}"
        print(f"\n== {store}: {args.messages:,} messages", flush=True)
        token = make_mesh(data_dir, url)
        filled = fill(store_url, token, args.messages, args.seed)
        print(
            f"filled in {filled.seconds:.0f} s; searcher is in {len(filled.searcher_rooms)} rooms"
            f" holding {filled.readable:,} messages"
            f" ({100 * filled.readable / args.messages:.1f} %)",
            flush=True,
        )
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"load average before the backfill: {load}", flush=True)
        done = trio.run(backfill, store_url, pg_data, args.indexer, args.backfill_cap)
        print(backfill_line(done, pg_data is not None), flush=True)
        if done["left"]:
            # the rest, so that search can be measured: as shipped
            rest = trio.run(backfill, store_url, pg_data, "shipped", None)
            print("  then the rest, to search: " + backfill_line(rest, pg_data is not None))
        size = index_size(store_url, data_dir, args.messages)
        print(f"index size: {size_line(size, args.messages)}", flush=True)
        if store == "sqlite":
            for line in explain_sqlite(data_dir, filled):
                print(f"  EXPLAIN QUERY PLAN {line}")
        result = measure_search(data_dir, url, pg_data, filled, args)
        report_search(store, result, args.runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sends(stores: list[str], cluster: Any, args: argparse.Namespace) -> None:
    """Both builds served at once on fresh stores; measured in turns index,
    noindex, noindex, index (``--runs`` such rounds), so that a change in
    the machine's load weighs on both alike; a round's ratio is its two
    index windows over its two noindex windows."""
    import trio

    texts, _ = Corpus(args.seed + 7).texts(2000)
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    ratios: dict[str, dict[str, list[float]]] = {}
    for store in stores:
        with tempfile.TemporaryDirectory(prefix="bench-search-sends-") as tmp:
            folder = Path(tmp)
            if cluster is not None and os.geteuid() == 0:
                shutil.chown(folder, "postgres")
            nodes = {mode: start_send_node(store, mode, cluster, folder) for mode in MODES}
            try:
                meshes = {
                    mode: trio.run(_common.setup_mesh, nodes[mode][0].url, args.senders, 0)
                    for mode in MODES
                }
                ratios[store] = {"ws": [], "rest": []}
                for run in range(args.runs):
                    got: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
                    for mode in ("index", "noindex", "noindex", "index"):
                        server, _, pg_data = nodes[mode]
                        r = send_window(server, meshes[mode], pg_data, texts, args)
                        got[mode].append(r)
                        results.setdefault((store, mode), []).append(r)
                    for kind in ("ws", "rest"):
                        with_index = sum(r[kind] for r in got["index"])
                        without = sum(r[kind] for r in got["noindex"])
                        ratios[store][kind].append(with_index / without)
                    print(
                        f"round {run + 1} {store}: WS "
                        + " / ".join(f"{r['ws']:.0f}" for r in got["index"])
                        + " with the index, "
                        + " / ".join(f"{r['ws']:.0f}" for r in got["noindex"])
                        + f" without ({ratios[store]['ws'][-1]:.2f}x); REST "
                        f"{ratios[store]['rest'][-1]:.2f}x",
                        flush=True,
                    )
            finally:
                for server, _, _ in nodes.values():
                    server.stop()
    print(
        f"\nsends with the index against without: {args.senders} senders, WS window "
        f"{args.window}, {args.runs} rounds of windows of {args.seconds:g} s (index, noindex,"
        " noindex, index); sends/s: median of the windows; ratio: median of the rounds';"
        " µs/send: server CPU (node + PostgreSQL)"
    )
    head = ("store", "build", "WS sends/s", "ratio", "µs/send", "REST sends/s", "ratio", "µs/send")
    print("{:<12}{:<10}{:>12}{:>8}{:>9}{:>14}{:>8}{:>9}{:>14}".format(*head, "client cores"))
    for store in stores:
        base = results[(store, "noindex")]
        for mode in ("noindex", "index"):
            rows = results[(store, mode)]
            figures = []
            for kind in ("ws", "rest"):
                rate = median([r[kind] for r in rows])
                ratio = median(ratios[store][kind]) if mode == "index" else 1.0
                cpu = median([r[kind + "_server_us"] for r in rows])
                figures.append(f"{rate:>{12 if kind == 'ws' else 14}.0f}{ratio:>7.2f}x{cpu:>9.0f}")
            client = median([max(r["ws_cpu"], r["rest_cpu"]) for r in rows])
            print(f"{store:<12}{mode:<10}{figures[0]}{figures[1]}{client:>14.2f}")
        for r in results[(store, "index")] + base:
            for error in r["errors"]:
                print(f"  ERROR {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--only", choices=("scale", "sends"), help="one part only")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=15, help="each query per run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--indexer",
        choices=("shipped", "descending"),
        default="shipped",
        help="the backfill as shipped, or as before its fix (SQLite: each batch newest first)",
    )
    parser.add_argument(
        "--backfill-cap",
        type=float,
        default=300.0,
        help="stop the timed backfill after this many seconds (0: never); the rest is then"
        " indexed as shipped, so that search can be measured",
    )
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    raise_fd_limit()
    started = time.monotonic()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average before the run (1, 5, 15 min): {load}", flush=True)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    from tests.stores import postgres_cluster

    with contextlib.ExitStack() as stack:
        cluster = None
        if "postgresql" in stores:
            cluster = stack.enter_context(postgres_cluster())
            if cluster is None:
                print("PostgreSQL is not installed: SQLite only")
                stores.remove("postgresql")
        if args.only != "sends":
            for store in stores:
                scale_store(store, cluster, args)
        if args.only != "scale":
            sends(stores, cluster, args)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\ntotal {time.monotonic() - started:.0f} s; load average at the end {load}")
    print(f"reproduce: {command_line()}")


def client_main() -> None:
    job = json.loads(sys.stdin.readline())
    if job["kind"] == "search":
        print(json.dumps(client_search(job)), flush=True)
    else:
        import trio

        print(json.dumps(trio.run(client_sends_async, job)), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--client"]:
        client_main()
    else:
        main()
