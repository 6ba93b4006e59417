"""tests/test_layers.py: the library's call structure, measured from its
object files ($BUILD/obj/*.o and the secure flavour's $BUILD/obj-secure/*.o,
via nm), must keep its layering: calls go down only (an object uses symbols
of its own layer or lower ones), the call graph
has no cycle, and the sources keep to their allowed includes. Prints the
graph for a reader and the "checks: N passed, N failed" line that
tests/run.sh adds up. `--graph` prints only the graph and its cycles."""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.environ.get("LAYERS_SRC", os.path.join(ROOT, "src"))
# The layer map is src/core.h's (its lines "  N name: a.c b.c"), bottom (0)
# to top: an object may use its own layer or lower. Names are object files
# without ".o"; a name not built yet is only noted. The README's design
# table must list the same files in each layer.
MAP_LINE = re.compile(r"^ \*   (\d+) ([a-zA-Z ,-]+): ([a-z_]+\.c(?: [a-z_]+\.c)*)$")


def read_layer_map(path):
    """[(name, [objects])] in layer order, from the map in core.h."""
    layers = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = MAP_LINE.match(line.rstrip("\n"))
            if m:
                layers.append((int(m.group(1)), m.group(2),
                               [c[:-2] for c in m.group(3).split()]))
    return layers


MAP = read_layer_map(os.path.join(SRC, "core.h"))
LAYERS = [(name, objects) for _, name, objects in MAP]

# At most one mutual pair of objects in the same layer may call each other,
# e.g. {frozenset({"heap", "large"})}. Any pair listed here must be justified
# in a comment in the core header, next to the declarations involved.
ALLOWED_PAIRS = set()

# Project headers each source may include (strata.h: the public header, as
# <strata.h> or "strata.h"). A source not listed here is not limited.
INCLUDE_RULES = {
    "arena.c": ["os.h", "report.h", "options.h", "instrument.h", "platform.h",
                "checkers.h", "strata.h"],
    "context.c": ["alloc.h", "report.h", "instrument.h", "platform.h",
                  "checkers.h", "strata.h"],
    "override.c": ["alloc.h", "os.h", "platform.h", "strata.h"],
    "operator_new.c": ["alloc.h", "os.h", "report.h", "platform.h", "strata.h"],
}
# Headers no file in src/ may include.
FORBIDDEN_HEADERS = ["internal.h"]
# A header private to a group of files lists them, bottom to top, in its
# opening comment (lines " *   name.c  what it holds"): only they may
# include it, they are one layer's, and each uses only the ones before it.
PRIVATE_HEADERS = ["heap_private.h"]
PRIVATE_LINE = re.compile(r"^ \*   ([a-z_]+\.c)  ")


def private_group(header):
    """The files a private header names as its group, bottom to top."""
    with open(os.path.join(SRC, header), encoding="utf-8") as f:
        return [m.group(1) for m in map(PRIVATE_LINE.match, f) if m]

BUILD = os.environ.get("BUILD", "build")
# The folders of objects under $BUILD, each checked in turn: the default
# flavour's and the secure flavour's.
OBJ_DIRS = os.environ.get("LAYERS_OBJ", "obj obj-secure").split()
passed = failed = 0


def check(condition, what, details=()):
    global passed, failed
    if condition:
        passed += 1
    else:
        failed += 1
        print("CHECK failed: %s" % what)
        for line in details:
            print("  " + line)


def nm(args, path):
    out = subprocess.run(["nm"] + args + [path], capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines()
            if len(line.split()) >= 2}


def read_graph(objects):
    """arrows[a][b] = the symbols a uses that b defines (a, b: names)."""
    defined, used = {}, {}
    for path in objects:
        name = os.path.basename(path)[:-2]
        defined[name] = nm(["--defined-only", "-g"], path)
        used[name] = nm(["-u"], path)
    definers = {}
    for name, symbols in defined.items():
        for s in symbols:
            definers.setdefault(s, set()).add(name)
    arrows = {name: {} for name in defined}
    for a, symbols in used.items():
        for s in symbols:
            for b in definers.get(s, ()):
                if b != a:
                    arrows[a].setdefault(b, set()).add(s)
    return arrows


def cycles(arrows):
    """Strongly connected components of more than one object (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(arrows[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            on_stack.difference_update(component)
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(arrows):
        if v not in index:
            visit(v)
    return sorted(found)


def symbols_text(symbols, most=6):
    s = sorted(symbols)
    more = " +%d more" % (len(s) - most) if len(s) > most else ""
    return ", ".join(s[:most]) + more


def print_graph(arrows, found):
    print("call graph (object -> objects whose symbols it uses):")
    for a in sorted(arrows):
        print("%s.o -> %s" % (a, ", ".join(b + ".o" for b in sorted(arrows[a]))
                              or "(nothing)"))
    for component in found:
        allowed = " (allowed pair)" if frozenset(component) in ALLOWED_PAIRS else ""
        print("cycle: " + " ".join(c + ".o" for c in component) + allowed)


def includes(path):
    """Project headers a source includes: every "x.h", and <x.h> where x.h is
    a header of src/ or include/ (so <strata.h> counts, <string.h> not)."""
    ours = {os.path.basename(h) for h in glob.glob(os.path.join(SRC, "*.h"))
            + glob.glob(os.path.join(ROOT, "include", "*.h"))} | {"strata.h"}
    found = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r'\s*#\s*include\s*([<"])([^>"]+)[>"]', line)
            if m and (m.group(1) == '"' or os.path.basename(m.group(2)) in ours):
                found.append(os.path.basename(m.group(2)))
    return found


def readme_layers(path):
    """{layer number: set of files} from the README's design table, whose
    rows start "| N name | `a.c`, `b.c` |"."""
    table = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\| (\d+) [^|]*\| ([^|]*) \|", line)
            if m:
                table[int(m.group(1))] = set(re.findall(r"`([a-z_]+\.c)`", m.group(2)))
    return table


def check_docs_map():
    """The README draws core.h's map, and no other doc draws one."""
    numbers = [n for n, _, _ in MAP]
    check(numbers == list(range(len(MAP))) and len(MAP) >= 9,
          "src/core.h has the layer map, layers 0..N in order", ["found layers %s" % numbers])
    want = {n: {o + ".c" for o in objects} for n, _, objects in MAP}
    drawn = readme_layers(os.path.join(ROOT, "README.md"))
    check(drawn == want, "the README's layer table is core.h's map",
          ["layer %d: README %s, core.h %s" % (n, sorted(drawn.get(n, ())), sorted(want.get(n, ())))
           for n in sorted(set(want) | set(drawn)) if drawn.get(n) != want.get(n)])
    others = [p for p in glob.glob(os.path.join(ROOT, "docs", "*.md")) + [os.path.join(ROOT, "HACKING.md")]
              if os.path.exists(p) and readme_layers(p)]
    check(not others, "no doc but the README draws a layer table",
          [os.path.relpath(p, ROOT) for p in others])
    on_disk = {os.path.basename(p) for p in glob.glob(os.path.join(SRC, "*.c"))}
    mapped = set().union(*want.values()) if want else set()
    check(on_disk == mapped, "every source of src/ is in the map, and only those",
          ["not in the map: %s" % sorted(on_disk - mapped), "in the map, no source: %s" % sorted(mapped - on_disk)])


def layer_table():
    """{object: layer number}, the table checked once."""
    layer_of, twice = {}, []
    for number, (_, names) in enumerate(LAYERS):
        for name in names:
            if name in layer_of:
                twice.append("%s.o is in layers %d and %d" % (name, layer_of[name], number))
            layer_of[name] = number
    check(not twice, "the layer table lists an object twice", twice)
    bad_pairs = ["allowed pair %s is not two objects of one layer" % sorted(p)
                 for p in ALLOWED_PAIRS
                 if len(p) != 2 or len({layer_of.get(n, -1 - i) for i, n in enumerate(p)}) != 1]
    if len(ALLOWED_PAIRS) > 1:
        bad_pairs.append("ALLOWED_PAIRS lists %d pairs: at most one" % len(ALLOWED_PAIRS))
    check(not bad_pairs, "ALLOWED_PAIRS holds at most one same-layer pair", bad_pairs)
    return layer_of, bool(bad_pairs)


def check_private_order(folder, layer_of):
    """Each private header's group is in one layer and calls down its list."""
    arrows = read_graph(sorted(glob.glob(os.path.join(BUILD, folder, "*.o"))))
    for header in PRIVATE_HEADERS:
        group = [name[:-2] for name in private_group(header)]
        layers = {layer_of.get(name) for name in group}
        check(len(group) >= 2 and len(layers) == 1 and None not in layers,
              "%s: %s names files of one layer" % (folder, header), ["%s: layer %s" % (n, layer_of.get(n)) for n in group])
        upward = ["%s.o -> %s.o (%s), listed after it" % (a, b, symbols_text(arrows[a][b]))
                  for i, a in enumerate(group) if a in arrows
                  for b in group[i + 1:] if b in arrows[a]]
        check(not upward, "%s: each file of %s uses only the ones listed before it" % (folder, header), upward)


def check_objects(folder, layer_of, bad_pairs):
    """The layering of the objects in $BUILD/folder; prints their graph."""
    objects = sorted(glob.glob(os.path.join(BUILD, folder, "*.o")))
    check(objects, "no object files in %s/%s: run make first" % (BUILD, folder))
    arrows = read_graph(objects)
    absent = sorted(set(layer_of) - set(arrows))
    if objects and absent:
        print("note: in the layer table but not built in %s: " % folder
              + ", ".join(n + ".o" for n in absent))
    unclassified = sorted(set(arrows) - set(layer_of))
    check(not unclassified, "%s: every object is in a layer" % folder,
          ["unclassified object %s.o: add it to a layer" % n for n in unclassified])

    upward = []
    for a in sorted(arrows):
        for b in sorted(arrows[a]):
            if a in layer_of and b in layer_of and layer_of[b] > layer_of[a]:
                upward.append("upward call: %s.o -> %s.o (%s); layer %d %s -> %d %s"
                              % (a, b, symbols_text(arrows[a][b]), layer_of[a],
                                 LAYERS[layer_of[a]][0], layer_of[b], LAYERS[layer_of[b]][0]))
    check(not upward, "%s: calls go down only (to the same layer or a lower one)" % folder, upward)

    found = cycles(arrows)
    lines = []
    for component in found:
        if frozenset(component) in ALLOWED_PAIRS and not bad_pairs:
            continue
        lines.append("cycle: " + " ".join(c + ".o" for c in component))
        lines += ["  %s.o -> %s.o (%s)" % (a, b, symbols_text(arrows[a][b]))
                  for a in component for b in sorted(arrows[a]) if b in component]
    check(not lines, "%s: the call graph has no cycle" % folder, lines)
    if arrows:
        print("%s:" % folder)
        print_graph(arrows, found)


def main():
    if "--graph" in sys.argv[1:]:
        objects = sorted(glob.glob(os.path.join(BUILD, OBJ_DIRS[0], "*.o")))
        if not objects:
            print("no object files in %s/%s: run make first" % (BUILD, OBJ_DIRS[0]))
            return 0
        arrows = read_graph(objects)
        print_graph(arrows, cycles(arrows))
        return 0
    check_docs_map()
    layer_of, bad_pairs = layer_table()
    for folder in OBJ_DIRS:
        check_objects(folder, layer_of, bad_pairs)
        check_private_order(folder, layer_of)

    sources = sorted(glob.glob(os.path.join(SRC, "*.c")) + glob.glob(os.path.join(SRC, "*.h")))
    for name, allowed in sorted(INCLUDE_RULES.items()):
        path = os.path.join(SRC, name)
        if os.path.exists(path):
            extra = sorted(set(includes(path)) - set(allowed))
            check(not extra, "src/%s includes only %s" % (name, ", ".join(allowed)),
                  ["src/%s includes %s" % (name, h) for h in extra])
    for header in PRIVATE_HEADERS:
        group = set(private_group(header))
        users = {os.path.basename(p) for p in sources if header in includes(p)}
        check(users == group, "src/%s is included by exactly the files it names" % header,
              ["includes it, not named: %s" % sorted(users - group),
               "named, does not include it: %s" % sorted(group - users)])
    for header in FORBIDDEN_HEADERS:
        users = [os.path.basename(p) for p in sources if header in includes(p)]
        check(not users, "no file in src/ includes %s" % header,
              ["src/%s includes %s" % (u, header) for u in users])

    print("checks: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
