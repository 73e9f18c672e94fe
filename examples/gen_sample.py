#!/usr/bin/env python3
"""Generates examples/app-stream.ndjson: a DynamoDB Streams sample for cdcview.

One GetRecords `Records[]` element per line, for the single-table design "App"
(key PK/SK, StreamViewType NEW_AND_OLD_IMAGES), covering five days from
2025-03-01T00:00:00Z. Every MODIFY and REMOVE carries the item's true old image.

Entities (and the views in examples/cdcview.yaml they feed):
  votes        PK=VOTE#<user>  SK=<day YYYY-MM-DD>  GSI1PK=DAY#<day>#<shard 0..3>
               GSI1SK=<user>, choice. Write-sharded by day (GSI1). On 2025-03-01
               exactly ann, bob and cy vote; later days have generated voters, some
               change their choice (MODIFY) or retract (REMOVE).
  users        PK=USER#<id>  SK=PROFILE  type=user, name, email,
               GSI1PK=EMAIL#<email>  GSI1SK=USER#<id> (GSI1; ByEntity EMAIL#{email}/PK).
               Some change their email (their GSI1 entry moves), a few are deleted.
  orders       PK=USER#<id>  SK=ORDER#<id>  type=order, status, created_at (ISO),
               total (N, decimals), GSI1PK=STATUS#<status>  GSI1SK=created_at.
               PENDING -> SHIPPED -> DELIVERED, or CANCELLED. open_since is present only
               while PENDING/SHIPPED (the sparse OpenOrders work queue); some orders are
               deleted, a few cancelled ones by DynamoDB's TTL process.
  enrollments  PK=STUDENT#<name>  SK=CLASS#<name>  (ByMember: the inverted view);
               some are dropped.
  stores       PK=STORE#<id>  SK=LOCATION  country, state, city (ByLocation); a few move
               or close.
  players      PK=PLAYER#<name>  SK=BOARD#<board>  board, score (N: negative, zero,
               decimals, large values written canonically) (ByScore); scores change.

Deterministic (fixed seed, standard library only). `--check` exits 1 if the file on disk
differs from what would be written.
"""

import argparse
import datetime
import decimal
import json
import os
import random
import sys
import zlib

SEED = 20250301
START = int(datetime.datetime(2025, 3, 1, tzinfo=datetime.timezone.utc).timestamp())
DAY = 86400
DAYS = 5
SPAN = DAYS * DAY
VOTE_SHARDS = 4
FIRST_SEQUENCE = 10**20  # 21-digit sequence numbers, like DynamoDB's

FIRST_NAMES = ["alice", "bruno", "carla", "dmitri", "elena", "farid", "greta", "hiro",
               "ines", "jonas", "kemal", "lucia", "mateo", "nadia", "oskar", "priya",
               "quinn", "rosa", "sami", "tara", "umar", "vera", "wen", "ximena",
               "yusuf", "zoe"]
LAST_NAMES = ["adams", "baker", "chen", "diaz", "evans", "fischer", "garcia", "haddad",
              "ito", "jensen", "kowalski", "lopez", "muller", "nguyen", "okafor", "patel"]
CLASSES = ["algebra", "biology", "chemistry", "drawing", "economics", "french",
           "geography", "history", "latin", "music", "physics", "statistics"]
PLACES = [
    ("US", "WA", "Seattle"), ("US", "WA", "Spokane"), ("US", "CA", "Oakland"),
    ("US", "CA", "San Diego"), ("US", "NY", "Buffalo"), ("US", "TX", "Austin"),
    ("CA", "ON", "Toronto"), ("CA", "ON", "Ottawa"), ("CA", "BC", "Vancouver"),
    ("CA", "QC", "Montreal"), ("DE", "BY", "Munich"), ("DE", "BY", "Nuremberg"),
    ("DE", "BE", "Berlin"), ("DE", "HH", "Hamburg"), ("FR", "IDF", "Paris"),
    ("GB", "ENG", "Leeds"), ("JP", "13", "Tokyo"),
]
BOARDS = ["arcade", "puzzle"]
CHOICES = ["A", "B", "C"]


def iso(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def day_of(seconds):
    return iso(seconds)[:10]


def canonical_number(value):
    """DynamoDB's canonical text of a number: plain decimal, no exponent or extra zeros."""
    d = decimal.Decimal(value)
    if d == 0:
        return "0"
    return format(d.normalize(), "f")


def s(text):
    return {"S": text}


def n(value):
    return {"N": canonical_number(value)}


def vote_shard(user, day):
    return zlib.crc32(f"{user}/{day}".encode()) % VOTE_SHARDS


class Stream:
    """The table's current items and the stream records their changes produce."""

    def __init__(self, rng):
        self.rng = rng
        self.items = {}
        self.records = []
        self.sequence = FIRST_SEQUENCE
        self.last_time = START - 1

    def _record(self, name, when, key, new, old, ttl=False):
        self.sequence += self.rng.randint(1, 40)
        self.last_time = max(self.last_time + 1, when)  # strictly increasing seconds
        body = {"ApproximateCreationDateTime": self.last_time,
                "Keys": {"PK": s(key[0]), "SK": s(key[1])}}
        if new is not None:
            body["NewImage"] = new
        if old is not None:
            body["OldImage"] = old
        size = len(json.dumps([body["Keys"], new, old], separators=(",", ":")))
        body.update({"SequenceNumber": str(self.sequence), "SizeBytes": size,
                     "StreamViewType": "NEW_AND_OLD_IMAGES"})
        record = {"eventID": "%032x" % self.rng.getrandbits(128), "eventName": name,
                  "eventSource": "aws:dynamodb", "awsRegion": "us-east-1"}
        if ttl:
            record["userIdentity"] = {"type": "Service",
                                      "principalId": "dynamodb.amazonaws.com"}
        record["dynamodb"] = body
        self.records.append(record)

    def put(self, when, attrs):
        item = {name: attrs[name] for name in sorted(attrs)}
        key = (item["PK"]["S"], item["SK"]["S"])
        old = self.items.get(key)
        if old == item:
            return
        self.items[key] = item
        self._record("MODIFY" if old else "INSERT", when, key, item, old)

    def update(self, when, key, set_attrs=None, remove=()):
        item = dict(self.items[key])
        item.update(set_attrs or {})
        for name in remove:
            item.pop(name, None)
        self.put(when, item)

    def delete(self, when, key, ttl=False):
        old = self.items.pop(key)
        self._record("REMOVE", when, key, None, old, ttl=ttl)


class Schedule:
    """Actions at points in time, run in time order (ties in the order they were added)."""

    def __init__(self):
        self.actions = []

    def at(self, when, action):
        self.actions.append((int(when), len(self.actions), action))

    def run(self, stream):
        for when, _, action in sorted(self.actions, key=lambda a: (a[0], a[1])):
            action(stream, when)


def plan_votes(rng, schedule):
    # Day one is fixed: exactly ann, bob and cy (the README's sharded-query example).
    first_day = day_of(START)
    shards = {vote_shard(u, first_day) for u in ("ann", "bob", "cy")}
    assert len(shards) >= 2, "ann, bob and cy must spread over at least two shards"
    voters = [f"{first}{i}" for i in range(1, 6) for first in FIRST_NAMES]
    for d in range(DAYS):
        day_start = START + d * DAY
        day = day_of(day_start)
        users = ["ann", "bob", "cy"] if d == 0 else sorted(rng.sample(voters, rng.randint(70, 95)))
        for user in users:
            when = rng.randint(day_start + 600, day_start + DAY // 2)
            key = (f"VOTE#{user}", day)
            attrs = {"PK": s(key[0]), "SK": s(day), "type": s("vote"),
                     "GSI1PK": s(f"DAY#{day}#{vote_shard(user, day)}"), "GSI1SK": s(user),
                     "choice": s(rng.choice(CHOICES))}
            schedule.at(when, lambda st, t, a=attrs: st.put(t, a))
            if d == 0:
                continue
            later = rng.randint(day_start + DAY // 2 + 600, day_start + DAY - 600)
            roll = rng.random()
            if roll < 0.15:
                choice = s(rng.choice(CHOICES))
                schedule.at(later, lambda st, t, k=key, c=choice: st.update(t, k, {"choice": c}))
            elif roll < 0.20:
                schedule.at(later, lambda st, t, k=key: st.delete(t, k))


def plan_users(rng, schedule):
    """Returns [(user id, creation time, deletion time or None)]."""
    users = []
    for i in range(1, 121):
        uid = f"u{i:03d}"
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        created = rng.randint(START, START + DAY)
        email = f"{first}.{last}{i}@example.com"
        attrs = {"PK": s(f"USER#{uid}"), "SK": s("PROFILE"), "type": s("user"),
                 "name": s(f"{first.title()} {last.title()}"), "email": s(email),
                 "GSI1PK": s(f"EMAIL#{email}"), "GSI1SK": s(f"USER#{uid}")}
        schedule.at(created, lambda st, t, a=attrs: st.put(t, a))
        key = (f"USER#{uid}", "PROFILE")
        last_change = created
        if rng.random() < 0.25:
            last_change = rng.randint(created + 3600, START + SPAN - 3600)
            new_email = f"{first}.{last}.{i}@mail.example.org"
            change = {"email": s(new_email), "GSI1PK": s(f"EMAIL#{new_email}")}
            schedule.at(last_change, lambda st, t, k=key, c=change: st.update(t, k, c))
        deleted = None
        if rng.random() < 0.07:
            deleted = rng.randint(last_change + 600, START + SPAN - 60)
            schedule.at(deleted, lambda st, t, k=key: st.delete(t, k))
        users.append((uid, created, deleted))
    return users


def plan_orders(rng, schedule, users):
    for i in range(1, 481):
        uid, user_created, deleted = rng.choice(users)
        latest = (deleted or START + SPAN) - 60
        created = rng.randint(user_created + 60, max(user_created + 61, latest))
        key = (f"USER#{uid}", f"ORDER#o{i:04d}")
        created_at = iso(created)
        cents = rng.choice([rng.randint(199, 9999), rng.randint(10000, 250000)])
        total = decimal.Decimal(cents) / 100
        attrs = {"PK": s(key[0]), "SK": s(key[1]), "type": s("order"), "status": s("PENDING"),
                 "created_at": s(created_at), "total": n(total), "open_since": s(created_at),
                 "GSI1PK": s("STATUS#PENDING"), "GSI1SK": s(created_at)}
        schedule.at(created, lambda st, t, a=attrs: st.put(t, a))
        plan_order_life(rng, schedule, key, created)


def plan_order_life(rng, schedule, key, created):
    def status(name, closed):
        change = {"status": s(name), "GSI1PK": s(f"STATUS#{name}")}
        remove = ("open_since",) if closed else ()
        return lambda st, t: st.update(t, key, change, remove)

    end = START + SPAN
    when = created + rng.randint(600, DAY)
    if rng.random() < 0.12:
        final = "CANCELLED"
    else:
        if when >= end:
            return  # still PENDING when the sample ends: stays in the work queue
        schedule.at(when, status("SHIPPED", closed=False))
        when += rng.randint(3600, 2 * DAY)
        final = "CANCELLED" if rng.random() < 0.05 else "DELIVERED"
    if when >= end:
        return
    schedule.at(when, status(final, closed=True))
    roll = rng.random()
    when += rng.randint(3600, DAY)
    if when < end and roll < 0.08:
        ttl = final == "CANCELLED"  # cancelled orders expire through TTL
        schedule.at(when, lambda st, t: st.delete(t, key, ttl=ttl))


def plan_enrollments(rng, schedule):
    for first in FIRST_NAMES + [f"{f}2" for f in FIRST_NAMES]:
        for cls in sorted(rng.sample(CLASSES, rng.randint(2, 5))):
            key = (f"STUDENT#{first}", f"CLASS#{cls}")
            when = rng.randint(START, START + 2 * DAY)
            attrs = {"PK": s(key[0]), "SK": s(key[1]), "type": s("enrollment"),
                     "enrolled_on": s(day_of(when))}
            schedule.at(when, lambda st, t, a=attrs: st.put(t, a))
            if rng.random() < 0.12:
                dropped = rng.randint(when + 3600, START + SPAN - 60)
                schedule.at(dropped, lambda st, t, k=key: st.delete(t, k))


def plan_stores(rng, schedule):
    for i in range(1, 61):
        key = (f"STORE#s{i:03d}", "LOCATION")
        country, state, city = rng.choice(PLACES)
        when = rng.randint(START, START + DAY)
        attrs = {"PK": s(key[0]), "SK": s(key[1]), "type": s("store"), "country": s(country),
                 "state": s(state), "city": s(city)}
        schedule.at(when, lambda st, t, a=attrs: st.put(t, a))
        roll = rng.random()
        later = rng.randint(when + 3600, START + SPAN - 60)
        if roll < 0.15:
            country, state, city = rng.choice(PLACES)
            move = {"country": s(country), "state": s(state), "city": s(city)}
            schedule.at(later, lambda st, t, k=key, m=move: st.update(t, k, m))
        elif roll < 0.30:
            schedule.at(later, lambda st, t, k=key: st.delete(t, k))


def random_score(rng):
    kind = rng.random()
    if kind < 0.45:
        return decimal.Decimal(rng.randint(-50, 5000))
    if kind < 0.75:
        return decimal.Decimal(rng.randint(-400, 20000)) / 4  # .25 / .5 / .75 steps
    if kind < 0.90:
        return decimal.Decimal(f"{rng.randint(1, 99)}E{rng.randint(3, 6)}")  # 1e3-style
    return decimal.Decimal(rng.randint(-9999, 9999)) / 100


def plan_players(rng, schedule):
    # Scores the README's ByScore examples use, so ordering across signs is visible.
    fixed = {("PLAYER#ada", "arcade"): "-12.5", ("PLAYER#bo", "arcade"): "0",
             ("PLAYER#cyd", "arcade"): "3.25", ("PLAYER#dee", "arcade"): "1E3"}
    names = ["ada", "bo", "cyd", "dee"] + [f"p{i:02d}" for i in range(1, 47)]
    for name in names:
        for board in BOARDS:
            if name in ("ada", "bo", "cyd", "dee") and board != "arcade":
                continue
            key = (f"PLAYER#{name}", f"BOARD#{board}")
            when = rng.randint(START, START + DAY // 2)
            score = fixed.get((key[0], board)) or random_score(rng)
            attrs = {"PK": s(key[0]), "SK": s(key[1]), "type": s("player"), "board": s(board),
                     "score": n(score)}
            schedule.at(when, lambda st, t, a=attrs: st.put(t, a))
            if (key[0], board) in fixed:
                continue  # keep the example scores as they are
            for _ in range(rng.randint(6, 16)):
                when = rng.randint(when + 60, when + 60 + SPAN // 10)
                if when >= START + SPAN:
                    break
                change = {"score": n(random_score(rng))}
                schedule.at(when, lambda st, t, k=key, c=change: st.update(t, k, c))


def generate():
    rng = random.Random(SEED)
    schedule = Schedule()
    plan_votes(rng, schedule)
    users = plan_users(rng, schedule)
    plan_orders(rng, schedule, users)
    plan_enrollments(rng, schedule)
    plan_stores(rng, schedule)
    plan_players(rng, schedule)
    stream = Stream(rng)
    schedule.run(stream)
    lines = [json.dumps(r, separators=(",", ":"), ensure_ascii=True) for r in stream.records]
    return "\n".join(lines) + "\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=os.path.join(here, "app-stream.ndjson"))
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if --output differs from what would be written")
    args = parser.parse_args()
    text = generate()
    if args.check:
        try:
            with open(args.output, encoding="ascii") as f:
                current = f.read()
        except OSError as e:
            print(f"{args.output}: {e.strerror}; run {sys.argv[0]} to write it", file=sys.stderr)
            return 1
        if current != text:
            print(f"{args.output} is out of date; run {sys.argv[0]} to regenerate it",
                  file=sys.stderr)
            return 1
        return 0
    with open(args.output, "w", encoding="ascii", newline="\n") as f:
        f.write(text)
    print(f"wrote {text.count(chr(10))} records ({len(text)} bytes) to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
