"""Synthetic DynamoDB Streams files for the App table of examples/cdcview.yaml.

Seeded and standard-library only: random inserts, updates and removes of votes, users,
orders, enrollments, stores and players (every view of the example config gets work),
plus replays of earlier records that the daemon must skip by sequence number.
"""

import json
import random

START = 1740787200  # 2025-03-01T00:00:00Z


def s(text):
    return {"S": text}


def n(text):
    return {"N": text}


def _score(rng):
    kind = rng.random()
    if kind < 0.4:
        return str(rng.randint(-500, 50000))
    if kind < 0.7:
        return f"{rng.randint(-4000, 4000) / 8}"
    if kind < 0.85:
        return f"{rng.randint(1, 99)}E{rng.randint(0, 5)}"
    return f"-0.{rng.randint(1, 999):03d}"


def _image(rng, key):
    pk, sk = key
    base = {"PK": s(pk), "SK": s(sk)}
    if pk.startswith("VOTE#"):
        day = sk
        base.update(type=s("vote"), GSI1PK=s(f"DAY#{day}#{rng.randint(0, 3)}"),
                    GSI1SK=s(pk[5:]), choice=s(rng.choice("ABC")))
    elif sk == "PROFILE":
        email = f"{pk[5:].lower()}.{rng.randint(1, 9)}@example.com"
        base.update(type=s("user"), email=s(email), GSI1PK=s(f"EMAIL#{email}"), GSI1SK=s(pk))
    elif sk.startswith("ORDER#"):
        status = rng.choice(["PENDING", "SHIPPED", "DELIVERED", "CANCELLED"])
        created = f"2025-03-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z"
        base.update(type=s("order"), status=s(status), created_at=s(created),
                    total=n(f"{rng.randint(100, 99999) / 100}"), GSI1PK=s(f"STATUS#{status}"),
                    GSI1SK=s(created))
        if status in ("PENDING", "SHIPPED"):
            base["open_since"] = s(created)
    elif sk.startswith("CLASS#"):
        base.update(type=s("enrollment"), enrolled_on=s(f"2025-03-{rng.randint(1, 9):02d}"))
    elif sk == "LOCATION":
        country, state, city = rng.choice([("US", "WA", "Seattle"), ("US", "CA", "Oakland"),
                                           ("DE", "BY", "Munich"), ("FR", "IDF", "Paris"),
                                           ("US", "WA", "Spokane"), ("JP", "13", "Tokyo")])
        base.update(type=s("store"), country=s(country), state=s(state), city=s(city))
    else:
        base.update(type=s("player"), board=s(sk[6:]), score=n(_score(rng)))
    return base


def _keys(rng, count):
    keys = []
    for i in range(count):
        kind = rng.randrange(6)
        if kind == 0:
            keys.append((f"VOTE#v{i}", f"2025-03-0{rng.randint(1, 5)}"))
        elif kind == 1:
            keys.append((f"USER#U{i}", "PROFILE"))
        elif kind == 2:
            keys.append((f"USER#U{rng.randrange(count)}", f"ORDER#o{i}"))
        elif kind == 3:
            keys.append((f"STUDENT#s{i % 97}", f"CLASS#c{i % 13}x{i}"))
        elif kind == 4:
            keys.append((f"STORE#{i}", "LOCATION"))
        else:
            keys.append((f"PLAYER#p{i}", f"BOARD#{rng.choice(['arcade', 'puzzle'])}"))
    return keys


def generate(records, seed, keys=None, replay_every=40):
    """`records` stream records (dicts) of puts, updates and removes, with replays."""
    rng = random.Random(seed)
    keys = _keys(rng, keys or max(50, records // 8))
    live, out, seq, when = {}, [], 10**20, START
    while len(out) < records:
        if out and rng.randrange(replay_every) == 0:
            out.append(json.loads(json.dumps(rng.choice(out[-500:]))))  # an old record again
            continue
        key = rng.choice(keys)
        seq += rng.randint(1, 30)
        when += rng.randint(0, 3)
        body = {"ApproximateCreationDateTime": when, "Keys": {"PK": s(key[0]), "SK": s(key[1])},
                "SequenceNumber": str(seq), "SizeBytes": 100, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        old = live.get(key)
        if old is not None and rng.random() < 0.2:
            name = "REMOVE"
            body["OldImage"] = old
            del live[key]
        else:
            name = "MODIFY" if old is not None else "INSERT"
            new = _image(rng, key)
            body["NewImage"] = new
            if old is not None:
                body["OldImage"] = old
            live[key] = new
        out.append({"eventID": f"{seq:032x}", "eventName": name, "eventSource": "aws:dynamodb",
                    "awsRegion": "us-east-1", "dynamodb": body})
    return out


def write(path, records):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
