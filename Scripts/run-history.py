#!/usr/bin/env python3
"""Plays a fixture history (Fixtures/NAME.jsonl) through the real `referral-ledger` CLI.

  python3 Scripts/run-history.py --cli PATH --data DIR Fixtures/NAME.jsonl [--quiet]

Commands go to one `referral-ledger submit` process, a line at a time; placeholders
{{code:USER:PROGRAM}}, {{old_code:USER:PROGRAM}} (the code before that), {{code_lower:USER:PROGRAM}} and
{{reward:APP:PROGRAM:SIDE:RECIPIENT:SLOT}}
are filled in as the history goes. `expect` lines are checked against the command results and
against the CLI's query verbs (subset match). Exit 0 when every expectation holds.
"""
import argparse
import hashlib
import json
import re
import subprocess
import sys

QUERY_FLAGS = {"app": "--app", "program": "--program", "user": "--user", "as_of": "--as-of",
               "status": "--status", "limit": "--limit", "cursor": "--cursor", "user_prefix": "--user-prefix", "input": "--input"}


def reward_id(app, program, side, recipient, slot):
    text = "\x1f".join([app, program, side, recipient, slot])
    return "rw_" + hashlib.sha256(text.encode()).hexdigest()[:32]


def contains(actual, expected, path="$"):
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path} is {json.dumps(actual)}, expected an object"
        for k, v in expected.items():
            if k not in actual:
                return f"{path}.{k} is missing"
            problem = contains(actual[k], v, f"{path}.{k}")
            if problem:
                return problem
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return f"{path} has {len(actual) if isinstance(actual, list) else '?'} items, expected {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            problem = contains(a, e, f"{path}[{i}]")
            if problem:
                return problem
        return None
    return None if actual == expected else f"{path} is {json.dumps(actual)}, expected {json.dumps(expected)}"


class History:
    def __init__(self, cli, data, quiet):
        self.cli, self.data, self.quiet = cli, data, quiet
        self.codes = {}
        self.failures = 0
        self.submit = subprocess.Popen([cli, "--data", data, "submit"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, bufsize=1)

    def fill(self, value):
        if isinstance(value, str):
            def one(m):
                parts = m.group(1).split(":")
                if parts[0] == "code":
                    return self.codes.get(f"{parts[1]}:{parts[2]}", "NO-CODE")
                if parts[0] == "old_code":
                    return self.codes.get(f"old:{parts[1]}:{parts[2]}", "NO-OLD-CODE")
                if parts[0] == "code_lower":
                    return "  " + self.codes.get(f"{parts[1]}:{parts[2]}", "none").lower() + " "
                if parts[0] == "reward":
                    return reward_id(parts[1], parts[2], parts[3], parts[4], ":".join(parts[5:]))
                return m.group(0)
            return re.sub(r"\{\{(.*?)\}\}", one, value)
        if isinstance(value, list):
            return [self.fill(v) for v in value]
        if isinstance(value, dict):
            return {k: self.fill(v) for k, v in value.items()}
        return value

    def query(self, kind, args):
        argv = [self.cli, "--data", self.data, kind]
        for k, v in args.items():
            if k in QUERY_FLAGS:
                argv += [QUERY_FLAGS[k], str(v)]
        run = subprocess.run(argv, capture_output=True, text=True)
        return json.loads(run.stdout if run.returncode == 0 else run.stderr)

    def run(self, path):
        last = None
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            line = line.strip()
            if not line or line.startswith("//"):
                if line.startswith("//") and not self.quiet:
                    print(f"\n{line[2:].strip()}")
                continue
            item = self.fill(json.loads(line))
            if "expect" in item:
                kind = item["expect"]
                if kind == "result":
                    actual = last
                elif kind in ("program", "programs") and "now" in item.get("args", {}):
                    continue  # the CLI answers for the real current month
                else:
                    actual = self.query(kind, item.get("args", {}))
                problem = contains(actual, item["answer"])
                if problem:
                    self.failures += 1
                    print(f"  ✗ line {n} ({kind}): {problem}")
                elif not self.quiet and kind != "result":
                    print(f"  ✓ {kind} {json.dumps(item.get('args', {}))} → {json.dumps(actual)[:160]}")
                continue
            self.submit.stdin.write(json.dumps(item) + "\n")
            self.submit.stdin.flush()
            last = json.loads(self.submit.stdout.readline())
            if item["type"] == "invite.create" and "code" in last:
                key = f"{item['user']}:{item['program']}"
                if key in self.codes and self.codes[key] != last["code"]:
                    self.codes["old:" + key] = self.codes[key]
                self.codes[key] = last["code"]
            if not self.quiet:
                kinds = ", ".join(e["type"] for e in last.get("events", []))
                verdict = "ok" if last.get("ok") else f"refused: {last['error']['code']}"
                dup = " (duplicate)" if last.get("duplicate") else ""
                print(f"  {item['type']:<22} {verdict}{dup}  {kinds}")
        self.submit.stdin.close()
        self.submit.wait()
        return self.failures


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cli", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("history")
    a = p.parse_args()
    failures = History(a.cli, a.data, a.quiet).run(a.history)
    if failures:
        print(f"{failures} expectation(s) failed", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
