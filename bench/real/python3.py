"""bench/real/python3.py: the python3 workload of bench/run.py's real
programs table: rounds of building records as dicts, indexing them, a JSON
round trip, strings joined, split and sorted, lists and bytes of many
sizes; a tenth of each round's records kept to the end, so that the
rounds' leftovers sit among what the next rounds allocate. Objects of up
to 512 bytes come from Python's own small-object allocator, the rest
(dict and list storage, long strings, the JSON text) from malloc.
usage: python3 python3.py [rounds [records]]   (default 2 rounds of 30000)"""
import json
import sys


def records(first, count):
    return [{"id": i, "name": "user-%07d" % i, "tags": ["t%d" % (i % 7), "g%d" % (i % 13)],
             "score": i * 0.25, "note": "n" * (i % 300)} for i in range(first, first + count)]


def one_round(number, count, kept):
    rows = records(number * count, count)
    by_name = {row["name"]: row for row in rows}
    by_tag = {}
    for row in rows:
        for tag in row["tags"]:
            by_tag.setdefault(tag, []).append(row["id"])
    copies = json.loads(json.dumps(rows))
    names = ",".join(row["name"] for row in copies).split(",")
    ordered = sorted(names, key=lambda name: name[::-1])
    pieces = ["%s=%s" % (name, name.upper()) * (1 + len(name) % 5) for name in ordered[:count // 2]]
    blobs = [bytes(i % 1024) for i in range(count // 2)]
    lists = [list(range(i % 3000)) for i in range(count // 20)]
    kept.extend(rows[::10])
    return len(by_name) + len(by_tag) + len(pieces) + sum(map(len, blobs)) + sum(map(len, lists))


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 30000
    kept = []
    total = sum(one_round(number, count, kept) for number in range(rounds))
    print("total=%d kept=%d" % (total, len(kept)))


if __name__ == "__main__":
    main()
