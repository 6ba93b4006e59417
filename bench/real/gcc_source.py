"""bench/real/gcc_source.py: writes the large C file that bench/run.py's
real programs table compiles with gcc -O2: structs, lookup tables, and
functions of loops over switches that call inline helpers, so that the
compiler inlines and optimizes a great deal (its memory is mostly its own
garbage-collected pages, the rest malloc's).
usage: python3 gcc_source.py FUNCTIONS > big.c"""
import sys


def source(functions):
    out = ["#include <stddef.h>", "#include <string.h>", "",
           "struct record { long key; double weight; char name[24]; struct record *next; };", ""]
    for h in range(8):
        out.append("static inline long mix%d(long a, long b) { return (a * %d + b) ^ (a >> %d); }"
                   % (h, 2 * h + 3, h + 1))
    out.append("")
    for f in range(functions):
        table = ", ".join(str((f * 31 + i * 17) % 1000) for i in range(64))
        out.append("static const short table%d[64] = {%s};" % (f, table))
        out.append("long step%d(struct record *r, long n, const char *text)" % f)
        out.append("{")
        out.append("    long acc = %d;" % f)
        out.append("    for (long i = 0; i < n; i++) {")
        out.append("        switch ((i + acc) & 7) {")
        for c in range(8):
            out.append("        case %d: acc = mix%d(acc, table%d[(i + %d) & 63]) + text[i & 7]; "
                       "r->weight += (double)acc / %d.0; break;" % (c, (f + c) % 8, f, c, c + 1))
        out.append("        }")
        out.append("        if (r->next != NULL && (acc & 7) == %d) {" % (f % 8))
        out.append("            r = r->next;")
        out.append("            memcpy(r->name, text, sizeof r->name - 1);")
        out.append("        }")
        out.append("    }")
        out.append("    return acc + r->key + %d;" % f)
        out.append("}")
        out.append("")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(source(int(sys.argv[1]) if len(sys.argv) > 1 else 60))
