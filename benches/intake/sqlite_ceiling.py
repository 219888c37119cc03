"""What this disk allows a durable SQLite intake (benches/intake.rs prints it as a baseline).

Inserts the fixture's bytes as rows of a WAL database with synchronous=FULL, as the store
does, from one connection with nothing else running: one commit per delivery (what
`insert_delivery` does) and a batch of 32 deliveries per commit (a group commit).

    python sqlite_ceiling.py BODY_FILE DIR
"""

import os
import sqlite3
import sys
import time


def rate(body: bytes, path: str, per_commit: int, rows: int = 4000) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE TABLE d (id TEXT PRIMARY KEY, payload BLOB NOT NULL, at INTEGER)")
    started = time.perf_counter()
    i = 0
    while i < rows:
        db.execute("BEGIN IMMEDIATE")
        for _ in range(per_commit):
            db.execute("INSERT INTO d VALUES (?, ?, ?)", (f"d-{i}", body, i))
            i += 1
        db.execute("COMMIT")
    took = time.perf_counter() - started
    db.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    return rows / took


def main() -> None:
    with open(sys.argv[1], "rb") as f:
        body = f.read()
    path = os.path.join(sys.argv[2], "ceiling.db")
    one, group = rate(body, path, 1), rate(body, path, 32)
    print(f"SQLITE_CEILING one_per_commit={one:.0f} group_of_32={group:.0f}")


if __name__ == "__main__":
    main()
