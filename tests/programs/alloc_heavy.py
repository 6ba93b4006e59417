# Allocation-heavy Python: dicts, strings, lists and threads; prints a digest.
import hashlib, threading

def work(seed, out):
    d = {}
    for i in range(60000):
        k = "k%d-%d" % (seed, i % 7000)
        d[k] = [str(i) * (i % 40), i, (k, seed)]
        if i % 3 == 0:
            d.pop("k%d-%d" % (seed, (i * 7) % 7000), None)
    s = "".join(sorted(d))
    out[seed] = hashlib.sha256(s.encode()).hexdigest()

out = {}
threads = [threading.Thread(target=work, args=(n, out)) for n in range(6)]
for t in threads: t.start()
for t in threads: t.join()
big = "x"
for i in range(22):
    big = big + big[: len(big) // 2 + 1]
print(len(big), [out[k][:12] for k in sorted(out)])
