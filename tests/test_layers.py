"""tests/test_layers.py: the library's call structure, measured from its
object files ($BUILD/obj/*.o and the secure flavour's $BUILD/obj-secure/*.o,
via nm), must keep its layering: calls go down only (an object uses symbols
of its own layer or lower ones), the call graph
has no cycle, and the sources keep to their allowed includes. The graph of
sources and headers has no cycle either (a header's inline calls and its
includes count, a source and its header being one file), and no file but
the small-block engine's touches a bin or a remote list. Prints the
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
    "context.c": ["api.h", "report.h", "instrument.h", "platform.h",
                  "checkers.h", "strata.h"],
    "override.c": ["api.h", "os.h", "platform.h", "strata.h"],
    "operator_new.c": ["api.h", "os.h", "report.h", "platform.h", "strata.h"],
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


# ---- the graph of sources and headers --------------------------------------
# One node per file, a source and the headers of its name being one (x.c,
# x.h and x_private.h), a header without a source its own. Arrows: an include; a source's
# use of a symbol another node's object alone defines (nm); a header's
# inline code calling a function another node defines (a declaration is no
# arrow: a header may declare its subsystem's functions, never call upward;
# nor is the read of a variable, such as the segment map's root, which
# layout.h describes and segment.c defines).
INLINE_START = re.compile(r"\bstatic\b[^;{}()]*\binline\b[^;{}]*\([^;{}]*\)\s*\{")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def inline_bodies(text):
    """The text of every static inline function's body in a header."""
    bodies = []
    for m in INLINE_START.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        bodies.append(text[m.end():i])
    return bodies


def node_of(filename):
    """x.c, x.h and x_private.h are node x (when x.c exists)."""
    stem, ext = os.path.splitext(filename)
    if stem.endswith("_private"):
        stem = stem[:-len("_private")]
    return stem if ext == ".c" or os.path.exists(os.path.join(SRC, stem + ".c")) else filename


def source_graph():
    """arrows[node] = {node: reason}, over src/'s sources and headers."""
    definers, functions, used = {}, set(), {}
    for folder in OBJ_DIRS:
        for path in glob.glob(os.path.join(BUILD, folder, "*.o")):
            name = os.path.basename(path)[:-2]
            out = subprocess.run(["nm", "--defined-only", "-g", path], capture_output=True, text=True,
                                 check=True).stdout
            for fields in (line.split() for line in out.splitlines()):
                if len(fields) >= 2:
                    definers.setdefault(fields[-1], set()).add(name)
                    if fields[-2] in ("T", "W"):
                        functions.add(fields[-1])
            used.setdefault(name, set()).update(nm(["-u"], path))
    arrows = {}
    for path in sorted(glob.glob(os.path.join(SRC, "*.c")) + glob.glob(os.path.join(SRC, "*.h"))):
        filename = os.path.basename(path)
        node = node_of(filename)
        out = arrows.setdefault(node, {})
        for header in includes(path):
            if os.path.exists(os.path.join(SRC, header)) and node_of(header) != node:
                out.setdefault(node_of(header), "includes %s" % header)
        if filename.endswith(".c"):
            for symbol in used.get(filename[:-2], ()):
                for definer in definers.get(symbol, ()):
                    if definer != node:
                        out.setdefault(definer, "uses %s" % symbol)
        else:
            with open(path, encoding="utf-8") as f:
                text = strip_comments(f.read())
            for body in inline_bodies(text):
                for word in set(re.findall(r"[A-Za-z_]\w*", body)) & functions:
                    for definer in definers.get(word, ()):
                        if definer != node:
                            out.setdefault(definer, "%s's inline code names %s" % (filename, word))
    for node in list(arrows):
        for target in arrows[node]:
            arrows.setdefault(target, {})
    return arrows


def check_source_graph():
    arrows = source_graph()
    lines = []
    for component in cycles(arrows):
        lines.append("cycle: " + " ".join(component))
        lines += ["  %s -> %s (%s)" % (a, b, arrows[a][b]) for a in component
                  for b in sorted(arrows[a]) if b in component]
    check(arrows and not lines, "the graph of sources and headers has no cycle", lines)


# The small-block engine (src/bins.h, src/bins.c): no other file touches a
# bin or a remote list, so that another engine swaps in behind bins.h
# (heap.h defines the fields, within struct heap).
ENGINE_FILES = ["bins.c", "bins.h", "heap.h"]
ENGINE_FIELDS = re.compile(r"(?:->|\.)\s*(bins|remote|bin_use|bin_growth|bins_aged_at|bin_events)\b")


def check_engine_boundary():
    touched = []
    for path in sorted(glob.glob(os.path.join(SRC, "*.[ch]"))):
        if os.path.basename(path) in ENGINE_FILES:
            continue
        with open(path, encoding="utf-8") as f:
            text = strip_comments(f.read())
        for m in ENGINE_FIELDS.finditer(text):
            touched.append("src/%s:%d: %s" % (os.path.basename(path), text.count("\n", 0, m.start()) + 1, m.group(0)))
    check(not touched, "only the engine's files (%s) touch a bin or a remote list" % ", ".join(ENGINE_FILES), touched)


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

    check_source_graph()
    check_engine_boundary()
    print("checks: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
