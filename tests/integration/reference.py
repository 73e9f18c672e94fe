"""An independent, pure-Python model of cdcview's views, for checking the daemon.

Written from the documented semantics (daemon/config/config.cc, index_builders/view_spec.h,
the design notes), not from the C++ code. It takes the same table definition the daemon's
config holds (the `tables[i]` mapping of cdcview.yaml, as Python data) and the same NDJSON
stream records, and answers what every view must contain.

Values are kept in "typed JSON" form, {"S": "text"}, {"N": "1.5"} (canonical number text),
{"B": "<base64>"}, {"BOOL": true}, {"NULL": true}, {"M": {...}}, {"L": [...]}: plain JSON
that compares by value because numbers are canonical.
"""

import base64
import decimal
import json
from dataclasses import dataclass, field
from typing import Optional

MAX_KEY_BYTES = 511  # LMDB's default key size limit: aggregate group keys
# DynamoDB's limits on a key value: a table's partition and sort key; both of a view's keys
# take the larger. The store takes encoded keys of any length.
MAX_PARTITION_KEY_BYTES = 2048
MAX_SORT_KEY_BYTES = 1024
_CTX = decimal.Context(prec=200)


# ---------------------------------------------------------------- values

def canonical_number(text):
    """DynamoDB's canonical text of a number: plain decimal, no exponent, no extra zeros."""
    d = decimal.Decimal(text)
    if not d.is_finite():
        raise ValueError(f"not a number: {text!r}")
    if d.is_zero():
        return "0"
    return format(d.normalize(_CTX), "f")


def canonical_value(value):
    """Typed JSON as read from a stream record -> typed JSON with canonical numbers."""
    (kind, body), = value.items()
    if kind == "N":
        return {"N": canonical_number(body)}
    if kind == "M":
        return {"M": {k: canonical_value(v) for k, v in body.items()}}
    if kind == "L":
        return {"L": [canonical_value(v) for v in body]}
    if kind == "NS":
        return {"NS": [canonical_number(v) for v in body]}
    return {kind: body}


def canonical_item(image):
    return {name: canonical_value(v) for name, v in image.items()}


def scalar_type(value):
    (kind, _), = value.items()
    return kind


def sort_key_of(value):
    """Python key ordering values the way DynamoDB does: S and B by bytes, N by value."""
    (kind, body), = value.items()
    if kind == "S":
        return body.encode("utf-8")
    if kind == "N":
        return decimal.Decimal(body)
    if kind == "B":
        return base64.b64decode(body)
    raise ValueError(f"not a key type: {kind}")


def _escaped_length(data):
    return len(data) + data.count(b"\x00")


def key_value_size(value):
    """A key value's size as DynamoDB counts it: S in UTF-8 bytes, B in bytes, N its text."""
    (kind, body), = value.items()
    if kind == "S":
        return len(body.encode("utf-8"))
    if kind == "B":
        return len(base64.b64decode(body))
    return len(body)


def check_key_size(what, value, limit, reason):
    size = key_value_size(value)
    if size > limit:
        raise Rejected(reason, f"{what} is {size} bytes, over DynamoDB's limit of {limit} bytes")


def encoded_key_size(value):
    """Bytes the documented key encoding (index_builders/key_codec.h) takes for `value`."""
    (kind, body), = value.items()
    if kind == "S" and body.isascii():
        return len(body) + body.count("\0") + 2
    if kind in ("S", "B"):
        data = body.encode("utf-8") if kind == "S" else base64.b64decode(body)
        return 1 + _escaped_length(data) + 1  # tag, escaped bytes, terminator
    d = decimal.Decimal(body)
    if d.is_zero():
        return 2  # tag, class
    digits = len(d.normalize(_CTX).as_tuple().digits)
    return 3 + (digits + 1 + 1) // 2  # tag, class, exponent, digit nibbles + end nibble


def plain_number(text):
    """N as the CLI prints it in plain JSON: its exact digits as a number when a double holds
    them (at most 15 significant digits, decimal exponent -307..307), else as a string."""
    d = decimal.Decimal(text)
    if d == 0:
        return text
    fits = len(d.normalize(_CTX).as_tuple().digits) <= 15 and -307 <= d.adjusted() <= 307
    return text if fits else json.dumps(text)


def plain_json(value):
    """Typed JSON -> the plain JSON text the CLI prints (N as plain_number)."""
    (kind, body), = value.items()
    if kind == "S":
        return json.dumps(body, ensure_ascii=False)
    if kind == "N":
        return plain_number(body)
    if kind == "B":
        return json.dumps(body)
    if kind == "BOOL":
        return "true" if body else "false"
    if kind == "NULL":
        return "null"
    if kind == "M":
        return plain_item_json(body)
    if kind == "L":
        return "[" + ",".join(plain_json(v) for v in body) + "]"
    if kind in ("SS", "BS"):
        return "[" + ",".join(json.dumps(v) for v in body) + "]"
    if kind == "NS":
        return "[" + ",".join(plain_number(n) for n in body) + "]"
    raise ValueError(kind)


def plain_item_json(item):
    return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{plain_json(item[k])}"
                          for k in sorted(item)) + "}"


# ---------------------------------------------------------------- specs

@dataclass
class Key:
    attribute: Optional[str] = None
    type: str = "S"
    parts: Optional[list] = None  # template: [(is_placeholder, text)]

    @staticmethod
    def parse(spec):
        if isinstance(spec, str):
            return Key(attribute=spec)
        if "template" in spec:
            return Key(type="S", parts=parse_template(spec["template"]))
        return Key(attribute=spec["attribute"], type=spec.get("type", "S"))

    def attributes(self):
        if self.parts is None:
            return [self.attribute]
        return [text for placeholder, text in self.parts if placeholder]

    def value(self, item):
        """The key value `item` gives, or None when an attribute is missing or mistyped."""
        if self.parts is None:
            v = item.get(self.attribute)
            return v if v is not None and scalar_type(v) == self.type else None
        text = []
        for placeholder, part in self.parts:
            if not placeholder:
                text.append(part)
                continue
            v = item.get(part)
            if v is None or scalar_type(v) not in ("S", "N"):
                return None
            text.append(next(iter(v.values())))
        return {"S": "".join(text)}


def parse_template(text):
    parts, literal, i = [], [], 0
    while i < len(text):
        c = text[i]
        if text.startswith("{{", i) or text.startswith("}}", i):
            literal.append(c)
            i += 2
        elif c == "{":
            end = text.index("}", i)
            if literal:
                parts.append((False, "".join(literal)))
                literal = []
            parts.append((True, text[i + 1:end]))
            i = end + 1
        else:
            literal.append(c)
            i += 1
    if literal:
        parts.append((False, "".join(literal)))
    return parts


@dataclass
class Condition:
    attribute: str
    op: str
    operand: object = None

    @staticmethod
    def parse(spec):
        for op in ("equals", "begins_with", "exists"):
            if op in spec:
                return Condition(spec["attribute"], op, spec[op])
        raise ValueError(f"no operator in {spec}")

    def holds(self, item):
        v = item.get(self.attribute)
        if self.op == "exists":
            return (v is not None) == bool(self.operand)
        if v is None:
            return False
        kind = scalar_type(v)
        body = next(iter(v.values()))
        if self.op == "begins_with":
            if kind == "S":
                return body.startswith(self.operand)
            if kind == "B":
                return base64.b64decode(body).startswith(self.operand.encode())
            return False
        operand = self.operand
        if isinstance(operand, bool):
            operand = "true" if operand else "false"
        operand = str(operand)
        if kind == "S":
            return body == operand
        if kind == "N":
            try:
                return decimal.Decimal(operand) == decimal.Decimal(body)
            except decimal.InvalidOperation:
                return False
        if kind == "BOOL":
            return operand == ("true" if body else "false")
        return False


@dataclass
class Rule:
    when: list
    pk: Key
    sk: Optional[Key]


@dataclass
class View:
    name: str
    rules: list
    projection: str = "ALL"  # ALL, KEYS_ONLY or INCLUDE
    include: list = field(default_factory=list)
    shard_count: int = 0  # write sharding of the partition key: 0 none
    shard_suffix: str = "#{shard}"

    @property
    def has_sort_key(self):
        return self.rules[0].sk is not None


def _conditions(spec):
    if spec is None:
        return []
    return [Condition.parse(c) for c in (spec if isinstance(spec, list) else [spec])]


def parse_view(spec, table_pk, table_sk):
    if spec.get("inverted"):
        rules = [Rule(_conditions(spec.get("filter")), table_sk, table_pk)]
    elif "rules" in spec:
        rules = [Rule(_conditions(r.get("when")), Key.parse(r["partition_key"]),
                      Key.parse(r["sort_key"]) if "sort_key" in r else None)
                 for r in spec["rules"]]
    else:
        rules = [Rule(_conditions(spec.get("filter")), Key.parse(spec["partition_key"]),
                      Key.parse(spec["sort_key"]) if "sort_key" in spec else None)]
    projection = spec.get("projection", "ALL")
    include = []
    if isinstance(projection, dict):
        include = list(projection["include"])
        projection = "INCLUDE"
    shards = spec.get("shards", {})
    return View(spec["name"], rules, projection, include, shards.get("count", 0),
                shards.get("suffix", "#{shard}"))


def split_shard(view, physical):
    """(logical key, shard) if the S text `physical` is `logical` + the view's suffix for a
    shard below its count (decimal, no leading zeros), else None."""
    if not view.shard_count:
        return None
    before, after = view.shard_suffix.split("{shard}")
    if not physical.endswith(after):
        return None
    rest = physical[:len(physical) - len(after)]
    digits = len(rest) - len(rest.rstrip("0123456789"))
    number = rest[len(rest) - digits:]
    if not number or (len(number) > 1 and number[0] == "0") or int(number) >= view.shard_count:
        return None
    rest = rest[:len(rest) - digits]
    if not rest.endswith(before):
        return None
    return rest[:len(rest) - len(before)], int(number)


# ---------------------------------------------------------------- the model

@dataclass
class Entry:
    pk: dict
    sk: Optional[dict]
    table_pk: dict
    table_sk: Optional[dict]
    item: dict

    def order(self):
        return (sort_key_of(self.pk), sort_key_of(self.sk) if self.sk else b"",
                sort_key_of(self.table_pk),
                sort_key_of(self.table_sk) if self.table_sk else b"")

    def key(self):
        return (_hashable(self.pk), _hashable(self.sk), _hashable(self.table_pk),
                _hashable(self.table_sk))


def _hashable(value):
    """A key value ({"S": ...}, {"N": canonical}, {"B": ...}) as a hashable pair."""
    return None if value is None else next(iter(value.items()))


class Rejected(Exception):
    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason
        self.message = message


class Model:
    """Items of one table and the entries of its views, fed stream records in order."""

    def __init__(self, table_spec):
        self.name = table_spec["name"]
        key = table_spec["key"]
        self.table_pk = Key.parse(key["partition"])
        self.table_sk = Key.parse(key["sort"]) if "sort" in key else None
        self.views = [parse_view(v, self.table_pk, self.table_sk)
                      for v in table_spec.get("views", [])]
        self.aggregates = [Aggregate.parse(a) for a in table_spec.get("aggregates", [])]
        self.items = {}  # primary key tuple -> (sequence number or "", image or None)
        self.entries = {}  # primary key tuple -> {view name: Entry} of its current image
        self.writes = {v.name: {"put": 0, "delete": 0} for v in self.views}
        self.outcomes = {"applied": 0, "skipped": 0, "rejected": 0}
        self.rejections = []  # (record number, reason, message)

    # -- entries

    def _match(self, view, item):
        for rule in view.rules:
            if all(c.holds(item) for c in rule.when):
                return rule
        return None

    def _project(self, view, rule, item):
        if view.projection == "ALL":
            return dict(item)
        keep = [self.table_pk.attribute] + ([self.table_sk.attribute] if self.table_sk else [])
        if rule is not None:
            keep += rule.pk.attributes() + (rule.sk.attributes() if rule.sk else [])
        if view.projection == "INCLUDE":
            keep += view.include
        return {name: item[name] for name in keep if name in item}

    def entry(self, view, item):
        """The entry `item` has in `view`, or None. Raises Rejected for a key too large."""
        rule = self._match(view, item)
        if rule is None:
            return None
        pk = rule.pk.value(item)
        sk = rule.sk.value(item) if rule.sk else None
        if pk is None or (rule.sk is not None and sk is None):
            return None
        tpk = item[self.table_pk.attribute]
        tsk = item[self.table_sk.attribute] if self.table_sk else None
        check_key_size(f"view {view.name}: partition key", pk, MAX_PARTITION_KEY_BYTES,
                       "key_too_large")
        if sk is not None:
            # A view's sort key may be the table's partition key (an inverted view).
            check_key_size(f"view {view.name}: sort key", sk, MAX_PARTITION_KEY_BYTES,
                           "key_too_large")
        return Entry(pk, sk, tpk, tsk, self._project(view, rule, item))

    # -- applying records

    def _primary_key(self, keys):
        names = [self.table_pk] + ([self.table_sk] if self.table_sk else [])
        for k in names:
            v = keys.get(k.attribute)
            if v is None:
                raise Rejected("bad_key", f"table {self.name}: key attribute {k.attribute} is missing")
            if scalar_type(v) != k.type:
                raise Rejected("bad_key", f"table {self.name}: key attribute {k.attribute} "
                                          f"must be {k.type}, got {scalar_type(v)}")
        for k, limit, what in zip(names, (MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES),
                                  ("partition", "sort")):
            check_key_size(f"table {self.name}: {what} key {k.attribute}", keys[k.attribute],
                           limit, "bad_key")
        return tuple(_hashable(keys[k.attribute]) for k in names)

    def apply(self, record, number=None):
        """Applies one decoded stream record; returns "applied", "skipped" or "rejected"."""
        try:
            outcome = self._apply(record)
        except Rejected as r:
            self.rejections.append((number, r.reason, r.message))
            outcome = "rejected"
        self.outcomes[outcome] += 1
        return outcome

    def _apply(self, record):
        body = record["dynamodb"]
        keys = canonical_item(body["Keys"])
        pk = self._primary_key(keys)
        seq = body.get("SequenceNumber", "")
        stored_seq, _ = self.items.get(pk, ("", None))
        if seq and stored_seq and int(seq) <= int(stored_seq):
            return "skipped"
        new = None
        if record["eventName"] != "REMOVE":
            new = canonical_item(body["NewImage"])
            for name, v in keys.items():
                if name in new and new[name] != v:
                    raise Rejected("bad_record", f"NewImage attribute {name} differs from the record's Keys")
                new.setdefault(name, v)
        old_entries = self.entries.get(pk, {})
        new_entries = {}
        if new is not None:  # all computed before anything changes: all or nothing
            for view in self.views:
                e = self.entry(view, new)
                if e is not None:
                    new_entries[view.name] = e
            for aggregate in self.aggregates:
                aggregate.check_key_size(new)
        for view in self.views:
            self._count(view, old_entries.get(view.name), new_entries.get(view.name))
        if new is not None or pk in self.items or seq:
            self.items[pk] = (seq, new)
        self.entries[pk] = new_entries
        return "applied"

    def _count(self, view, before, after):
        w = self.writes[view.name]
        if before and after and before.key() == after.key():
            if before.item != after.item:
                w["put"] += 1
            return
        if before:
            w["delete"] += 1
        if after:
            w["put"] += 1

    # -- answers

    def view(self, name):
        for v in self.views:
            if v.name == name:
                return v
        raise KeyError(name)

    def scan(self, name):
        """Every entry of view `name`, in key order."""
        self.view(name)  # KeyError for an unknown view
        entries = [per_view[name] for per_view in self.entries.values() if name in per_view]
        entries.sort(key=Entry.order)
        return entries

    def query(self, name, pk, op=None, value=None, value2=None, backward=False):
        """Entries of one partition; op is EQ, LT, LE, GT, GE, BETWEEN, BEGINS_WITH or None.

        For a sharded view and a logical key (not itself a physical key): the entries of all
        its shards, ordered by sort key then table key (what follows the partition key)."""
        view = self.view(name)
        if view.shard_count and scalar_type(pk) == "S" and split_shard(view, pk["S"]) is None:
            before, after = view.shard_suffix.split("{shard}")
            keys = {f"{pk['S']}{before}{i}{after}".encode() for i in range(view.shard_count)}
            out = [e for e in self.scan(name) if sort_key_of(e.pk) in keys and
                   (op is None or _sort_holds(e.sk, op, value, value2))]
            out.sort(key=lambda e: Entry.order(e)[1:])
        else:
            want = sort_key_of(pk)
            out = [e for e in self.scan(name) if sort_key_of(e.pk) == want and
                   (op is None or _sort_holds(e.sk, op, value, value2))]
        return out[::-1] if backward else out

    def shard_item_counts(self, name):
        """Entries per shard number of a sharded view, over all logical keys."""
        view = self.view(name)
        counts = [0] * view.shard_count
        for e in self.scan(name):
            split = split_shard(view, e.pk["S"])
            if split is not None:
                counts[split[1]] += 1
        return counts

    def get_item(self, keys):
        pk = self._primary_key(canonical_item(keys))
        return self.items.get(pk, ("", None))[1]


    def aggregate(self, name):
        """Every group of aggregate `name`, recomputed from the current items, in group order:
        [(group typed value, Group)]."""
        for a in self.aggregates:
            if a.name == name:
                return a.groups(image for _, image in self.items.values() if image is not None)
        raise KeyError(name)


# ---------------------------------------------------------------- aggregates

# Sums are exact (enough digits for any sum of DynamoDB numbers); averages are rounded to 38
# significant digits, ties to even.
_SUM = decimal.Context(prec=1000)
_AVG = decimal.Context(prec=38, rounding=decimal.ROUND_HALF_EVEN)
_UINT32_MAX = 2**32 - 1


def split_shard_suffix(suffix, physical):
    """(logical, shard) if `physical` ends with `suffix` ("#{shard}") for some shard number
    (decimal, no leading zeros, at most 10 digits, <= 2^32-1); else None."""
    before, after = suffix.split("{shard}")
    if not physical.endswith(after):
        return None
    rest = physical[:len(physical) - len(after)]
    digits = 0
    while digits < len(rest) and digits < 10 and rest[len(rest) - 1 - digits].isdigit():
        digits += 1
    if digits == 0:
        return None
    number = rest[len(rest) - digits:]
    if len(number) > 1 and number[0] == "0":
        return None
    if int(number) > _UINT32_MAX:
        return None
    rest = rest[:len(rest) - digits]
    if not rest.endswith(before):
        return None
    return rest[:len(rest) - len(before)], int(number)


@dataclass
class Measure:
    kind: str        # count, sum, min, max, avg
    attribute: str = ""

    @property
    def name(self):
        return "count" if self.kind == "count" else f"{self.kind}({self.attribute})"


@dataclass
class Group:
    """One group (or one shard of it): members and the measures' texts (None: unset)."""
    members: int = 0
    measures: dict = field(default_factory=dict)
    shards: list = field(default_factory=list)  # [(physical group text, Group)]


@dataclass
class Aggregate:
    name: str
    filter: list
    group_by: Key
    strip: str
    measures: list

    @staticmethod
    def parse(spec):
        measures = []
        for m in spec["measures"]:
            if m == "count":
                measures.append(Measure("count"))
            else:
                (kind, attribute), = m.items()
                measures.append(Measure(kind, attribute))
        return Aggregate(spec["name"], _conditions(spec.get("filter")),
                         Key.parse(spec["group_by"]), spec.get("strip_shard_suffix", ""),
                         measures)

    def placement(self, item):
        """(logical group typed value, shard or None) of a member, or None for a non-member."""
        if not all(c.holds(item) for c in self.filter):
            return None
        value = self.group_by.value(item)
        if value is None:
            return None
        if self.strip:
            split = split_shard_suffix(self.strip, value["S"])
            if split is not None:
                return {"S": split[0]}, split[1]
        return value, None

    def check_key_size(self, item):
        place = self.placement(item)
        if place is None:
            return
        size = encoded_key_size(place[0]) + (0 if not self.strip else 1 if place[1] is None else 5)
        room = MAX_KEY_BYTES - 1 - 22  # measure number, largest N key component
        if size > room:
            raise Rejected("key_too_large", f"aggregate {self.name}: group key is {size} bytes, "
                                            f"over the {room} bytes the store's key limit leaves for it")

    def _measures(self, members):
        out = {}
        for m in self.measures:
            if m.kind == "count":
                out[m.name] = str(len(members))
                continue
            values = [decimal.Decimal(item[m.attribute]["N"]) for item in members
                      if scalar_type(item.get(m.attribute, {"NULL": True})) == "N"]
            if not values:
                out[m.name] = None
                continue
            total = decimal.Decimal(0)
            for v in values:
                total = _SUM.add(total, v)
            if m.kind == "sum":
                out[m.name] = canonical_number(total)
            elif m.kind == "min":
                out[m.name] = canonical_number(min(values))
            elif m.kind == "max":
                out[m.name] = canonical_number(max(values))
            else:
                out[m.name] = canonical_number(_AVG.divide(total, len(values)))
        return out

    def groups(self, items):
        by_group = {}
        for item in items:
            place = self.placement(item)
            if place is None:
                continue
            group, shard = place
            by_group.setdefault(_hashable(group), (group, {}))[1].setdefault(shard, []).append(item)
        out = []
        for _, (group, shards) in sorted(by_group.items(), key=lambda kv: sort_key_of(kv[1][0])):
            members = [item for per_shard in shards.values() for item in per_shard]
            g = Group(len(members), self._measures(members))
            if self.strip:
                for shard in sorted(shards, key=lambda s: -1 if s is None else s):
                    physical = group["S"] if shard is None else \
                        group["S"] + self.strip.replace("{shard}", str(shard))
                    g.shards.append((physical, Group(len(shards[shard]), self._measures(shards[shard]))))
            out.append((group, g))
        return out


def _sort_holds(sk, op, value, value2):
    if op == "BEGINS_WITH":
        (kind, body), = sk.items()
        prefix = next(iter(value.values()))
        if kind == "S":
            return body.encode().startswith(prefix.encode())
        return base64.b64decode(body).startswith(base64.b64decode(prefix))
    s, v = sort_key_of(sk), sort_key_of(value)
    if op == "EQ":
        return s == v
    if op == "LT":
        return s < v
    if op == "LE":
        return s <= v
    if op == "GT":
        return s > v
    if op == "GE":
        return s >= v
    if op == "BETWEEN":
        return v <= s <= sort_key_of(value2)
    raise ValueError(op)


def load_records(path):
    """(line number, record) for every non-blank line of an NDJSON stream file."""
    out = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                out.append((number, json.loads(line)))
    return out


def build(table_spec, records):
    model = Model(table_spec)
    for number, record in records:
        model.apply(record, number)
    return model


# The App table of examples/cdcview.yaml, as data (the sample tests check that the daemon
# running that very file agrees with a model built from this).
EXAMPLE_TABLE = {
    "name": "App",
    "key": {"partition": "PK", "sort": "SK"},
    "views": [
        {"name": "GSI1", "partition_key": {"attribute": "GSI1PK", "type": "S"},
         "sort_key": {"attribute": "GSI1SK", "type": "S"}, "projection": "ALL"},
        {"name": "OpenOrders", "partition_key": {"template": "OPEN"},
         "sort_key": {"attribute": "open_since", "type": "S"},
         "projection": {"include": ["status", "total"]}},
        {"name": "ByMember", "inverted": True, "projection": "KEYS_ONLY"},
        {"name": "ByEntity", "rules": [
            {"when": {"attribute": "type", "equals": "order"},
             "partition_key": {"template": "STATUS#{status}"},
             "sort_key": {"template": "{created_at}"}},
            {"when": {"attribute": "type", "equals": "user"},
             "partition_key": {"template": "EMAIL#{email}"},
             "sort_key": {"attribute": "PK", "type": "S"}}]},
        {"name": "ByLocation", "partition_key": {"attribute": "country", "type": "S"},
         "sort_key": {"template": "{state}#{city}"}},
        {"name": "ByScore", "partition_key": {"attribute": "board", "type": "S"},
         "sort_key": {"attribute": "score", "type": "N"}},
        {"name": "VotesByDay", "filter": {"attribute": "type", "equals": "vote"},
         "partition_key": {"attribute": "GSI1PK", "type": "S"},
         "sort_key": {"attribute": "GSI1SK", "type": "S"}, "projection": "KEYS_ONLY",
         "shards": {"count": 4, "suffix": "#{shard}"}},
    ],
    "aggregates": [
        {"name": "VotesPerDay", "filter": {"attribute": "GSI1PK", "begins_with": "DAY#"},
         "group_by": {"template": "{GSI1PK}"}, "strip_shard_suffix": "#{shard}",
         "measures": ["count"]},
        {"name": "OrderTotals", "filter": {"attribute": "type", "equals": "order"},
         "group_by": {"attribute": "status"},
         "measures": ["count", {"sum": "total"}, {"min": "total"}, {"max": "total"},
                      {"avg": "total"}]},
    ],
}

EXAMPLE_VIEWS = [v["name"] for v in EXAMPLE_TABLE["views"]]
EXAMPLE_AGGREGATES = [a["name"] for a in EXAMPLE_TABLE["aggregates"]]
