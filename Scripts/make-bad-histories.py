#!/usr/bin/env python3
"""Makes the bad-history fixtures (Fixtures/bad-*.jsonl) from clean fixture histories.

  python3 Scripts/make-bad-histories.py --cli .build/debug/referral-ledger

Each clean history is played through the real CLI, exported, then altered the way a forger
would: a flipped byte (chain left as it is), or a changed decision with every later prev_hash
recomputed so that the hashes agree. Fixtures/bad-histories.json names the rule `verify` must
report for each file.
"""
import argparse
import hashlib
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "Fixtures")


def canonical(obj):
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode("utf-8")


def export(cli, history):
    with tempfile.TemporaryDirectory() as data:
        subprocess.run(["python3", os.path.join(ROOT, "Scripts/run-history.py"), "--quiet", "--cli", cli, "--data", data,
                        os.path.join(FIX, history)], check=True)
        out = subprocess.run([cli, "--data", data, "export"], check=True, capture_output=True).stdout
    return [line for line in out.split(b"\n") if line]


def rechain(values):
    prev = "0" * 64
    out = []
    for v in values:
        e = json.loads(v)
        e["prev_hash"] = prev
        b = canonical(e)
        out.append(b)
        prev = hashlib.sha256(b).hexdigest()
    return out


def events(values):
    return [json.loads(v) for v in values]


def write(name, values):
    with open(os.path.join(FIX, name), "wb") as f:
        f.write(b"\n".join(values) + b"\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cli", required=True)
    cli = os.path.abspath(p.parse_args().cli)
    manifest = {}

    def backdate(history, event_type, when, name, rule):
        """The first event of `event_type` (and its recorded command) dated `when`, before the
        program's activation, re-chained."""
        es = events(export(cli, history))
        event = next(e for e in es if e["type"] == event_type)
        activated = next(e for e in es if e["type"] == "program.activated")
        event["at"] = event["data"]["command"]["at"] = when
        assert activated["at"] > event["at"]
        write(name, rechain([canonical(e) for e in es]))
        manifest[name] = rule

    # 1. A flipped byte in a stored value: the next prev_hash no longer matches.
    values = export(cli, "duplicate-events.jsonl")
    v = bytearray(values[6])
    i = v.index(b'"bob"') + 1
    v[i] = ord("c")
    values[6] = bytes(v)
    write("bad-flipped-byte.jsonl", values)
    manifest["bad-flipped-byte.jsonl"] = "chain.prev_hash"

    # 2. A reward's benefit swapped to another version's, re-chained.
    es = events(export(cli, "edit-threshold-lowered.jsonl"))
    target = next(e for e in es if e["type"] == "reward.earned" and e["data"]["program_version"] == 2)
    target["data"]["benefit"] = {"type": "custom", "feature": "month", "payload": {}}
    write("bad-benefit-swapped.jsonl", rechain([canonical(e) for e in es]))
    manifest["bad-benefit-swapped.jsonl"] = "reward.benefit"

    # 3. A once-only reward earned twice, re-chained.
    es = events(export(cli, "duplicate-events.jsonl"))
    k = next(n for n, e in enumerate(es) if e["type"] == "reward.earned")
    twin = json.loads(json.dumps(es[k]))
    twin["data"]["slot"] = "n:2"
    twin["data"]["reward_id"] = "rw_forged_second_once_reward_00000"
    twin["data"].pop("command", None)
    es.insert(k + 1, twin)
    for n, e in enumerate(es, 1):
        e["position"] = n
    write("bad-once-earned-twice.jsonl", rechain([canonical(e) for e in es]))
    manifest["bad-once-earned-twice.jsonl"] = "reward.once_twice"

    # 4. An enrolment of a friend by themself, re-chained.
    es = events(export(cli, "competing-inviters.jsonl"))
    enrolled = next(e for e in es if e["type"] == "referral.enrolled")
    enrolled["data"]["friend"] = enrolled["data"]["inviter"]
    write("bad-self-enrolment.jsonl", rechain([canonical(e) for e in es]))
    manifest["bad-self-enrolment.jsonl"] = "referral.self_referral"

    # 5. A reward fulfilled twice, re-chained.
    es = events(export(cli, "failed-delivery.jsonl"))
    k = max(n for n, e in enumerate(es) if e["type"] == "delivery.succeeded" and not e["data"].get("after_recorded_delivery"))
    again = json.loads(json.dumps(es[k]))
    again["data"]["command"]["at"] = again["at"] = "2026-03-04T00:00:00Z"
    es.insert(k + 1, again)
    for n, e in enumerate(es, 1):
        e["position"] = n
    write("bad-fulfilled-twice.jsonl", rechain([canonical(e) for e in es]))
    manifest["bad-fulfilled-twice.jsonl"] = "reward.fulfilled_twice"

    # 6. An offer code assigned twice, re-chained.
    es = events(export(cli, "inventory.jsonl"))
    assigned = [e for e in es if e["type"] == "offer_code.assigned"]
    assigned[1]["data"]["code"] = assigned[0]["data"]["code"]
    write("bad-code-assigned-twice.jsonl", rechain([canonical(e) for e in es]))
    manifest["bad-code-assigned-twice.jsonl"] = "offer_code.assigned_twice"

    # 7. A program created with a config the rules refuse (a threshold of 0 friends), re-chained.
    es = events(export(cli, "caps.jsonl"))
    created = next(e for e in es if e["type"] == "program.created")
    created["data"]["config"]["inviter"]["reward"]["friends"] = 0
    created["data"]["command"]["config"]["inviter"]["reward"]["friends"] = 0
    write("bad-program-config.jsonl", rechain([canonical(e) for e in es]))
    manifest["bad-program-config.jsonl"] = "program.bad_config"

    # 8. A qualification citing a position no log has (-1), re-chained: a value the fold cannot
    # apply is reported, never a crash.
    es = events(export(cli, "caps.jsonl"))
    qualified = next(e for e in es if e["type"] == "referral.qualified")
    qualified["data"]["fact_position"] = -1
    write("bad-negative-position.jsonl", rechain([canonical(e) for e in es]))
    manifest["bad-negative-position.jsonl"] = "fold.error"

    # 9. A program edit back-dated before the program's activation (command and events alike),
    # re-chained: the edit rewrites a timeline the log already holds.
    backdate("edit-threshold-lowered.jsonl", "program.version_published", "2026-01-01T00:00:00Z", "bad-backdated-edit.jsonl", "program.backdated")

    # 10. A friend reward whose trigger is a purchase, citing the enrolment instead (no purchase),
    # re-chained.
    es = events(export(cli, "refunds.jsonl"))
    reward = next(e for e in es if e["type"] == "reward.earned" and e["data"]["side"] == "friend"
                  and e["data"]["trigger_position"] is not None)
    enrolled = next(e for e in es if e["type"] == "referral.enrolled" and e["data"]["friend"] == reward["data"]["recipient"]
                    and e["data"]["program"] == reward["data"]["program"])
    reward["data"]["trigger_position"] = enrolled["position"]
    write("bad-friend-trigger.jsonl", rechain([canonical(e) for e in es]))
    manifest["bad-friend-trigger.jsonl"] = "reward.no_trigger"

    # 11. A recipient rewritten in a canonically equivalent spelling (NFD: "e" + U+0301 for "é"),
    # re-chained: equal to the rules' string comparison, another user to every byte-keyed index.
    es = events(export(cli, "duplicate-events.jsonl"))
    reward = next(e for e in es if e["type"] == "reward.earned")
    reward["data"]["recipient"] = reward["data"]["recipient"] + "e\u0301"
    write("bad-unnormalized-id.jsonl", rechain([canonical(e) for e in es]))
    manifest["bad-unnormalized-id.jsonl"] = "identifier.not_nfc"

    # 12. A webhook secret recorded as sent (the ledger records only its digest), re-chained.
    es = events(export(cli, "failed-delivery.jsonl"))
    configured = next(e for e in es if e["type"] == "app.configured" and "webhook_secret" in e["data"]["settings"])
    configured["data"]["settings"]["webhook_secret"] = configured["data"]["command"]["settings"]["webhook_secret"] = "s3cret"
    write("bad-secret-in-log.jsonl", rechain([canonical(e) for e in es]))
    manifest["bad-secret-in-log.jsonl"] = "settings.secret_in_log"

    # 13. One line of an export deleted (chain left as it is): one gap, where it is.
    values = export(cli, "caps.jsonl")
    del values[5]
    write("bad-missing-line.jsonl", values)
    manifest["bad-missing-line.jsonl"] = "chain.gap"

    # 14. An invite code back-dated before the program's first activation (command and event),
    # re-chained: a code from before the program accepted referrals makes older accounts "new".
    backdate("caps.jsonl", "invite.created", "2020-01-01T00:00:00Z", "bad-backdated-invite.jsonl", "invite.before_activation")

    # 15. A sandbox reward's simulated delivery turned into a failed outside call (command and
    # event), re-chained: sandbox programs never call outside, so nothing can fail.
    es = events(export(cli, "failed-delivery.jsonl"))
    done = next(e for e in es if e["type"] == "delivery.succeeded" and e["data"]["simulated"])
    done["type"] = done["data"]["command"]["type"] = "delivery.failed"
    done["data"]["command"]["error"] = done["data"]["error"] = "HTTP 500"
    del done["data"]["simulated"]
    done["data"]["retry_at"] = "2026-03-06T00:00:07Z"
    done["data"]["final"] = False
    write("bad-sandbox-failure.jsonl", rechain([canonical(e) for e in es]))
    manifest["bad-sandbox-failure.jsonl"] = "delivery.simulated_failed"

    with open(os.path.join(FIX, "bad-histories.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()
