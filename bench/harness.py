"""bench/harness.py: what every strata benchmark table shares: finding the
allocators on this machine, running a benchmark program under each through
LD_PRELOAD, and turning runs into medians, ratios and tables."""
import csv
import glob
import os
import platform
import re
import tempfile
import statistics
import shutil
import subprocess
import sys
import time

# Debian package that ships each allocator, for the "how to install" line,
# and for the allocators measured in more than one version (mimalloc: 2.0
# from Debian, 3.x built by hand), the version the name carries where the
# package's own cannot be read (None: the name carries none).
KNOWN = [
    ("jemalloc", "libjemalloc.so.2", "libjemalloc2", None),
    ("mimalloc", "libmimalloc.so.2", "libmimalloc2.0", "2.0"),
    ("tcmalloc", "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4", None),
]
LIBRARY_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"]
# Scudo, the hardened allocator of LLVM's compiler-rt (Android's), as
# Debian ships it for each LLVM version: the newest found is measured.
SCUDO_GLOB = "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.scudo_standalone-%s.so"
SCUDO_PACKAGE = "libclang-rt-dev"


def find_scudo(pattern=None):
    """(name, path) of the newest Scudo found (named scudo-LLVM, as
    scudo-14), or None."""
    paths = glob.glob(pattern or SCUDO_GLOB % os.uname().machine)

    def llvm_version(path):
        match = re.search(r"/llvm-(\d+)/", path)
        return int(match.group(1)) if match else 0
    if not paths:
        return None
    newest = max(paths, key=llvm_version)
    return ("scudo-%d" % llvm_version(newest), newest)


# The names that need no BENCH_ALLOCATORS entry.
OWN_NAMES = ("strata", "strata secure", "glibc")


def package_version(package):
    """The upstream version of an installed Debian package ("2.0.9" of
    "2.0.9+ds-2"); None where dpkg-query cannot tell."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
    except OSError:
        return None
    version = out.stdout.strip().split(":", 1)[-1]
    if out.returncode != 0 or not version:
        return None
    return re.split(r"[-+~]", version)[0]


def find_allocators(strata_lib, search_dirs=None, secure_lib=None, extra=(), scudo_glob=None):
    """[(name, preload path or None)], strata first, then its secure flavour
    (when built), glibc, every known allocator found and the `extra` ones
    (parse_allocator_list's); missing ones are reported with their
    package. A known allocator measured in more than one version is named
    NAME-VERSION, as the extra ones are by convention."""
    found = [("strata", os.path.abspath(strata_lib))]
    if secure_lib is not None and os.path.exists(secure_lib):
        found.append(("strata secure", os.path.abspath(secure_lib)))
    found.append(("glibc", None))
    missing = []
    for name, soname, package, fallback_version in KNOWN:
        paths = [p for d in (search_dirs or LIBRARY_DIRS) for p in glob.glob(os.path.join(d, soname))]
        if paths:
            if fallback_version is not None:
                name = "%s-%s" % (name, package_version(package) or fallback_version)
            found.append((name, paths[0]))
        else:
            missing.append((name, package))
    scudo = find_scudo(scudo_glob)
    if scudo is not None:
        found.append(scudo)
    else:
        missing.append(("scudo", SCUDO_PACKAGE))
    taken = [name for name, _ in found]
    for name, path in extra:
        if name in taken or name in OWN_NAMES:
            raise ValueError("%s: the name is taken by an allocator found here; give it another, "
                             "with its version (NAME-VERSION=PATH)" % name)
        found.append((name, path))
    return found, missing


def parse_allocator_list(text):
    """BENCH_ALLOCATORS's "NAME=PATH ..." (blank-separated; by convention
    NAME-VERSION, "mimalloc-3.4.3", as the tables show it) as [(name,
    absolute path)]; ValueError saying what is wrong: a word without a
    name or a path, a name given twice, a file that does not exist."""
    allocators = []
    for word in text.split():
        name, _, path = word.partition("=")
        if not name or not path:
            raise ValueError("%r is not NAME=PATH (for example mimalloc-3.4.3=../peers/lib/mimalloc3.so)" % word)
        if name in [n for n, _ in allocators]:
            raise ValueError("%s is named twice" % name)
        if not os.path.isfile(path):
            raise ValueError("%s: %s does not exist" % (name, path))
        allocators.append((name, os.path.abspath(path)))
    return allocators


MALLOC_FAMILY = ("malloc", "free", "calloc", "realloc")


def malloc_refusal(probe, preload):
    """Why a process started with `preload` (None: no preload, glibc's
    malloc) would not have the allocator's malloc family, as the `probe`
    program (bench/mallocfrom) reports it; None when it would. The loader
    only warns and goes on with the C library's malloc when a preloaded
    library cannot be loaded, and a library may load and replace nothing."""
    if preload is not None and not os.path.isfile(preload):
        return "%s does not exist" % preload
    if not os.path.exists(probe):
        return "%s is not built (make bench builds it)" % probe
    out = subprocess.run([probe], env=environment(preload), capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return "%s failed under it (%d): %s" % (probe, out.returncode, out.stderr.strip()[-300:])
    files = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    for function in MALLOC_FAMILY:
        file = files.get(function, "unknown")
        if preload is None:
            served = os.path.basename(file).startswith("libc.so")
        else:
            served = os.path.exists(file) and os.path.samefile(file, preload)
        if not served:
            return "%s comes from %s, not %s (%s)" % (function, file, preload or "the C library",
                                                     out.stderr.strip()[-300:] or "the loader said nothing")
    return None


def parse_fields(line):
    """'a=1 b=2.5 c=x' -> {'a': 1.0, 'b': 2.5, 'c': 'x'}."""
    fields = {}
    for item in line.split():
        if "=" not in item:
            continue
        key, value = item.split("=", 1)
        try:
            fields[key] = float(value)
        except ValueError:
            fields[key] = value
    return fields


def median(values):
    values = [v for v in values if v is not None]
    if not values:
        raise ValueError("median of no values")
    return statistics.median(values)


def ratio(value, reference):
    """value / reference; None when the reference is zero."""
    return None if not reference else value / reference


def paired_ratios(rows, name, reference, case, key):
    """name's figure over reference's, run by run (the two ran next to each
    other in each run), sorted; the runs where both have the figure."""
    by_run = {(r["allocator"], r["run"]): r[key] for r in rows if r["case"] == case}
    runs = sorted({run for (allocator, run) in by_run if allocator == name})
    return sorted(ratio(by_run[(name, n)], by_run[(reference, n)]) for n in runs
                  if (reference, n) in by_run and by_run[(reference, n)])


def paired_ratio(rows, name, reference, case, key):
    """The median of paired_ratios: on a machine whose speed changes from one
    run to the next, a slow spell that falls on one allocator's run moves
    its ratio for that run only, not the median of its runs."""
    return median(paired_ratios(rows, name, reference, case, key))


def misuse_outcome(program, kind, size, preload):
    """How tests/programs/attacks.c's `kind` at `size` ended with `preload`
    (None: glibc): "stops" (killed by a signal, or neutralised), "passes"
    (it went through), or "exit N" (the program's own failure); as
    tests/test_security.sh tells them."""
    try:
        out = subprocess.run([program, kind, size], env=environment(preload), capture_output=True, text=True,
                             timeout=60)
    except subprocess.TimeoutExpired:
        return "timed out"
    if out.stdout.startswith("got through: "):
        return "passes"
    if out.returncode < 0 or (out.returncode == 0 and out.stdout.startswith("neutralised: ")):
        return "stops"
    return "exit %d" % out.returncode


def environment(preload, env_extra=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    env.update(env_extra or {})
    return env


class ProgramFailed(RuntimeError):
    """A program measured that exited with a status other than 0 or was
    killed: returncode as subprocess gives it (below 0: the signal)."""

    def __init__(self, command, returncode, stderr):
        super().__init__("%s failed (%d): %s" % (" ".join(command), returncode, stderr[-500:]))
        self.returncode = returncode


def run_program(command, preload, env_extra=None, timeout=600):
    """Runs a benchmark program, returns the parsed fields of each output line."""
    out = subprocess.run(command, env=environment(preload, env_extra), capture_output=True,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise ProgramFailed(command, out.returncode, out.stderr)
    return [parse_fields(line) for line in out.stdout.splitlines() if "=" in line]


MEMORY_CALLS = "mmap,munmap,mremap,madvise,mprotect,brk"


def count_memory_calls(command, preload):
    """The memory-management system calls (MEMORY_CALLS) a run makes, counted
    by strace; None when strace is not installed."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    with tempfile.NamedTemporaryFile(mode="r") as out:
        run = subprocess.run([strace, "-f", "-c", "-o", out.name, "-e", "trace=" + MEMORY_CALLS] + command,
                             env=environment(preload), capture_output=True, text=True)
        if run.returncode != 0:
            raise ProgramFailed(command, run.returncode, run.stderr)
        for line in out.read().splitlines():
            fields = line.split()
            if fields and fields[-1] == "total":
                return int(fields[3] if len(fields) >= 5 else fields[2])
    return 0


def run_timed(command, preload, peakrss, env_extra=None):
    """Runs a program through the `peakrss` helper, returns (wall
    milliseconds, peak resident MB, stdout)."""
    with tempfile.NamedTemporaryFile(mode="r") as peak:
        env = environment(None, dict(env_extra or {}, PEAKRSS_OUT=peak.name))
        if preload:
            env["LD_PRELOAD"] = preload  # reaches the command through the helper
        start = time.monotonic()
        out = subprocess.run([peakrss] + command, env=env, capture_output=True, text=True)
        elapsed = (time.monotonic() - start) * 1000.0
        if out.returncode != 0:
            # peakrss exits with 128 + the signal that killed the command.
            signal = out.returncode - 128 if out.returncode > 128 else 0
            raise ProgramFailed(command, -signal if signal else out.returncode, out.stderr)
        return elapsed, kb_to_mb(int(peak.read().strip() or 0)), out.stdout


def free_loopback_port():
    """A loopback port no one listens on now (the kernel's choice)."""
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_preload(preload):
    """What LD_PRELOAD gives redis-server for an allocator: Debian's redis
    links jemalloc, so glibc's malloc comes first in its lookups only when
    the C library itself is preloaded."""
    return "libc.so.6" if preload is None else preload


def maps_hold(pid, library):
    """Whether /proc/PID/maps maps the library (a path, or a bare file
    name such as libc.so.6)."""
    with open("/proc/%d/maps" % pid) as f:
        mapped = {line.split()[-1] for line in f if len(line.split()) >= 6}
    if os.sep not in library:
        return any(os.path.basename(m) == library for m in mapped)
    real = os.path.realpath(library)
    return any(os.path.realpath(m) == real for m in mapped if m.startswith(os.sep))


def redis_info(port, section):
    out = subprocess.run(["redis-cli", "-p", str(port), "info", section], capture_output=True, text=True, timeout=30)
    return dict(line.strip().split(":", 1) for line in out.stdout.splitlines() if ":" in line)


def run_redis(preload, benchmark_args):
    """Starts redis-server on a free loopback port with the allocator
    preloaded into it alone (never into redis-benchmark), drives it with
    `redis-benchmark -p PORT benchmark_args`, and returns (the benchmark's
    wall milliseconds, the server's peak resident MB). Raises
    RuntimeError when the server does not start or its malloc was not the
    preloaded one: its mappings must hold the library, and unless the
    library is jemalloc, redis's own jemalloc must have served next to
    nothing of what redis counts as used."""
    library = redis_preload(preload)
    port = free_loopback_port()
    folder = tempfile.mkdtemp(prefix="strata-bench-redis.")
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", folder],
                              env=environment(library), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True,
                             timeout=10).stdout.strip() != "PONG":
            if server.poll() is not None and server.returncode < 0:
                raise ProgramFailed(["redis-server"], server.returncode, "")
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not answer within 10 s (preloaded: %s)" % library)
            time.sleep(0.05)
        if not maps_hold(server.pid, library):
            raise RuntimeError("redis-server's mappings do not hold %s: its malloc is not the preloaded one" % library)
        start = time.monotonic()
        driven = subprocess.run(["redis-benchmark", "-p", str(port)] + benchmark_args, capture_output=True,
                                text=True, timeout=600)
        elapsed = (time.monotonic() - start) * 1000.0
        if server.poll() is not None:
            raise ProgramFailed(["redis-server"], server.returncode, "")
        if driven.returncode != 0:
            raise RuntimeError("redis-benchmark failed (%d): %s" % (driven.returncode, driven.stderr[-500:]))
        with open("/proc/%d/status" % server.pid) as f:
            peak = read_status_field(f.read(), "VmHWM")
        memory = redis_info(port, "memory")
        own = memory.get("allocator_allocated")
        if (own is not None and not os.path.basename(os.path.realpath(library)).startswith("libjemalloc")
                and int(own) > int(memory["used_memory"]) // 2):
            raise RuntimeError("redis's own jemalloc allocated %s of the %s bytes redis used: it served redis, "
                               "not %s" % (own, memory["used_memory"], library))
        return elapsed, peak
    finally:
        subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True, timeout=30)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(folder, ignore_errors=True)


def kb_to_mb(kb):
    return kb / 1024.0


def read_status_field(text, field):
    """The value in MB of a 'Field:   N kB' line of /proc/PID/status text."""
    for line in text.splitlines():
        if line.startswith(field + ":"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return kb_to_mb(int(parts[1]))
    raise KeyError(field)


def human(value):
    """Short human form of a rate: 18.8 M, 950 k."""
    if value >= 1e9:
        return "%.2f G" % (value / 1e9)
    if value >= 1e6:
        return "%.1f M" % (value / 1e6)
    if value >= 1e3:
        return "%.0f k" % (value / 1e3)
    return "%.0f" % value


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def csv_value(value):
    """Integers as integers, other numbers to 6 significant digits."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else "%.6g" % value
    return value


def write_csv(path, rows):
    """The runs, one a row: allocator, case and run first, then the program's
    fields in the order it printed them."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    keys = [k for k in ("allocator", "case", "run") if any(k in row for row in rows)]
    for row in rows:
        keys += [k for k in row if k not in keys]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows({k: csv_value(v) for k, v in row.items()} for row in rows)


def machine_line():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s, %d cores, %s %s" % (cpu or platform.processor(), os.cpu_count() or 0,
                                    platform.system(), platform.release())


def progress(message):
    print(message, file=sys.stderr, flush=True)


# bench/README.md shows the published run's tables between these lines,
# written there by `bench/run.py --publish` and compared by
# `--check-published`: the tables are never edited by hand.
TABLES_BEGIN = "<!-- The tables of bench/published/tables.md, written by bench/run.py --publish. -->"
TABLES_END = "<!-- End of the published tables. -->"
PUBLISHED_FILES = (".csv", ".dat", ".svg", ".md")


def tables_block(tables_text):
    """What the README shows of a run's tables.md: all but its heading."""
    lines = tables_text.rstrip("\n").split("\n")
    if lines and lines[0].startswith("## "):
        lines = lines[1:]
    while lines and lines[0] == "":
        lines = lines[1:]
    return "\n".join(lines)


def readme_tables(readme_text):
    """The block between the markers, or None when they are missing."""
    begin, end = readme_text.find(TABLES_BEGIN), readme_text.find(TABLES_END)
    if begin < 0 or end < begin:
        return None
    return readme_text[begin + len(TABLES_BEGIN):end].strip("\n")


def splice_tables(readme_text, tables_text):
    """The README with its block replaced by tables.md's; ValueError
    without the markers."""
    if readme_tables(readme_text) is None:
        raise ValueError("the README has no %r ... %r block" % (TABLES_BEGIN, TABLES_END))
    begin = readme_text.find(TABLES_BEGIN) + len(TABLES_BEGIN)
    end = readme_text.find(TABLES_END)
    return readme_text[:begin] + "\n\n" + tables_block(tables_text) + "\n\n" + readme_text[end:]


def publish(run_dir, published_dir, readme):
    """Makes the run in run_dir the published one: its tables, CSVs and
    plots replace published_dir's, and its tables the README's block."""
    with open(os.path.join(run_dir, "tables.md"), encoding="utf-8") as f:
        tables = f.read()
    with open(readme, encoding="utf-8") as f:
        text = splice_tables(f.read(), tables)
    os.makedirs(published_dir, exist_ok=True)
    for name in os.listdir(published_dir):
        if name.endswith(PUBLISHED_FILES):
            os.remove(os.path.join(published_dir, name))
    for name in sorted(os.listdir(run_dir)):
        if name.endswith(PUBLISHED_FILES):
            shutil.copyfile(os.path.join(run_dir, name), os.path.join(published_dir, name))
    with open(readme, "w", encoding="utf-8") as f:
        f.write(text)


def published_differences(published_dir, readme):
    """Why the README's tables are not published_dir's tables.md (a list of
    lines; empty when they are)."""
    try:
        with open(os.path.join(published_dir, "tables.md"), encoding="utf-8") as f:
            want = tables_block(f.read())
        with open(readme, encoding="utf-8") as f:
            have = readme_tables(f.read())
    except OSError as e:
        return [str(e)]
    if have is None:
        return ["%s has no block between %r and %r" % (readme, TABLES_BEGIN, TABLES_END)]
    if have == want:
        return []
    import difflib
    return list(difflib.unified_diff(want.split("\n"), have.split("\n"), "published tables.md", readme,
                                     lineterm="", n=1))[:40]

