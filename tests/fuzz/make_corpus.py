#!/usr/bin/env python3
"""Regenerates the seed corpora in tests/fuzz/corpus/<target>/ from the project's own inputs:

- dynamodb_streams_json: records of examples/app-stream.ndjson (each eventName, each shape)
  and the JSON objects written as string literals in tests/daemon/decode/dynamodb_json_test.cc;
- debezium_json: the envelopes written as string literals of tests/daemon/decode/debezium_json_test.cc, each
  with the test's message key in front (key, NUL byte, value: the target's input format);
- config_yaml: examples/cdcview.yaml, deploy/k8s/base/cdcview.yaml and the YAML configs
  written as string literals in tests/daemon/config/*_test.cc;
- the others (protobuf_event, page_token, consistency_token, key_codec, item_codec,
  h2_framing): what our code produces, written by each fuzz target in seed mode
  (CDCVIEW_FUZZ_SEEDS=DIR, see tests/fuzz/fuzz_support.h) from the build in build-asan.

Files named crash-* or regression-* are inputs that once broke a property; they are kept.
Usage: tests/fuzz/make_corpus.py [BUILD_DIR]   (default build-asan; its fuzz targets built)
"""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(HERE, "tests", "fuzz", "corpus")
CODE_SEEDED = ["protobuf_event", "page_token", "consistency_token", "key_codec", "item_codec",
               "h2_framing", "dynamodb_expression"]
MAX_SEEDS = 40  # per target: the corpus is a start, libFuzzer grows its own from it


LITERAL = r'(?:R"\((?:.|\n)*?\)"|"(?:[^"\\\n]|\\.)*")'


def unescape(body):
    return re.sub(r'\\(x[0-9a-fA-F]{2}|.)',
                  lambda m: chr(int(m.group(1)[1:], 16)) if m.group(1)[0] == "x" else
                  {"n": "\n", "t": "\t", "0": "\0"}.get(m.group(1), m.group(1)), body)


def string_literals(path):
    """The string literals of a C++ file, adjacent ones joined as a C++ compiler joins them."""
    text = open(path, encoding="utf-8").read()
    out = []
    for group in re.finditer(LITERAL + r'(?:\s*' + LITERAL + ')*', text):
        parts = []
        for lit in re.finditer(LITERAL, group.group(0)):
            lit = lit.group(0)
            parts.append(lit[3:-2] if lit.startswith('R"(') else unescape(lit[1:-1]))
        out.append("".join(parts))
    return out


def reset(target):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    for name in os.listdir(d):
        if not name.startswith(("crash-", "regression-")):
            os.remove(os.path.join(d, name))
    return d


def write(d, prefix, seeds):
    seen = set()
    for seed in seeds:
        data = seed if isinstance(seed, bytes) else seed.encode()
        digest = hashlib.sha1(data).hexdigest()[:12]
        if digest in seen or len(seen) >= MAX_SEEDS:
            continue
        seen.add(digest)
        with open(os.path.join(d, f"{prefix}-{digest}"), "wb") as f:
            f.write(data)
    return len(seen)


def dynamodb_seeds():
    records, shapes = [], set()
    with open(os.path.join(HERE, "examples", "app-stream.ndjson"), encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            shape = (r["eventName"], tuple(sorted(r["dynamodb"])),
                     tuple(sorted(r["dynamodb"].get("NewImage", {}))))
            if shape not in shapes:
                shapes.add(shape)
                records.append(line.strip())
    tests = [s for s in string_literals(os.path.join(HERE, "tests/daemon/decode/dynamodb_json_test.cc"))
             if s.lstrip().startswith("{")]
    return records[:20] + tests


def debezium_seeds():
    path = os.path.join(HERE, "tests/daemon/decode/debezium_json_test.cc")
    strings = string_literals(path)
    key = '{"PK":"USER#1","SK":"PROFILE"}'
    return [key + "\0" + s for s in strings if s.lstrip().startswith("{") and s != key]


def config_seeds():
    seeds = [open(os.path.join(HERE, p), encoding="utf-8").read()
             for p in ("examples/cdcview.yaml", "deploy/k8s/base/cdcview.yaml")]
    config_tests = os.path.join(HERE, "tests/daemon/config")
    for name in sorted(os.listdir(config_tests)):
        seeds += [s for s in string_literals(os.path.join(config_tests, name)) if "tables:" in s]
    return seeds


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "build-asan")
    counts = {
        "dynamodb_streams_json": write(reset("dynamodb_streams_json"), "seed", dynamodb_seeds()),
        "debezium_json": write(reset("debezium_json"), "seed", debezium_seeds()),
        "config_yaml": write(reset("config_yaml"), "seed", config_seeds()),
    }
    for target in CODE_SEEDED:
        d = reset(target)
        binary = os.path.join(build, "tests", "fuzz", f"fuzz_{target}")
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([binary], env=dict(os.environ, CDCVIEW_FUZZ_SEEDS=tmp), check=True,
                           stdout=subprocess.DEVNULL)
            seeds = {n: open(os.path.join(tmp, n), "rb").read() for n in sorted(os.listdir(tmp))}
        for name, data in seeds.items():
            with open(os.path.join(d, f"seed-{name}"), "wb") as f:
                f.write(data)
        counts[target] = len(seeds)
    for target, n in counts.items():
        print(f"[corpus] {target}: {n} seeds")


if __name__ == "__main__":
    main()
