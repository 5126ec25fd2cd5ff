#!/usr/bin/env python3
"""Checks a referral-ledger data folder with py-lmdb alone, as an auditor without Swift would.

  python3 Scripts/check-ledger.py DATA_DIR

Reads the named database `events` (key: position as 8-byte big-endian; value: compact JSON),
checks that keys run 1..N with no gap, that each value is a JSON object whose `position`
matches its key, that each `prev_hash` is the SHA-256 of the previous value's exact bytes
(64 zeros for the first), and that `meta` holds head_position = N and head_hash = SHA-256
of the last value. Prints a JSON summary; exit 0 when clean, 1 otherwise.
"""
import hashlib
import json
import struct
import sys

import lmdb


def main(path):
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=32, subdir=True)
    events = env.open_db(b"events", create=False)
    meta = env.open_db(b"meta", create=False)
    problems = []
    expected = 1
    prev = "0" * 64
    with env.begin() as txn:
        for key, value in txn.cursor(db=events):
            (position,) = struct.unpack(">Q", key)
            if position != expected:
                problems.append(f"key {position}: expected {expected}")
            try:
                event = json.loads(value.decode("utf-8"))
            except ValueError as e:
                problems.append(f"event {position}: not JSON ({e})")
                event = {}
            if event.get("position") != position:
                problems.append(f"event {position}: value says position {event.get('position')}")
            if event.get("prev_hash") != prev:
                problems.append(f"event {position}: prev_hash does not chain")
            missing = {"position", "type", "at", "recorded_at", "command_id", "data", "prev_hash"} - set(event)
            if missing:
                problems.append(f"event {position}: missing {sorted(missing)}")
            prev = hashlib.sha256(value).hexdigest()
            expected = position + 1
        count = expected - 1
        head_position = txn.get(b"head_position", db=meta)
        head_hash = txn.get(b"head_hash", db=meta)
        if count > 0 or head_position is not None:
            if head_position is None or int(head_position) != count:
                problems.append(f"meta head_position {head_position!r} != {count}")
            if head_hash is None or head_hash.decode() != prev:
                problems.append("meta head_hash does not match the last value")
    print(json.dumps({"ok": not problems, "events": count, "head_hash": prev, "problems": problems[:50]}))
    return 0 if not problems else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
