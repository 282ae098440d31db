import re, sys
def parse(path):
    out = {}; k = None
    for line in open(path):
        m = re.match(r"KC=(\w+) k=(\d+): median ([\d.]+)", line)
        if m: k = int(m.group(2)); out[k] = {"median": float(m.group(3)), "rows": []}; continue
        if k is None or not line.strip() or line.startswith("-") or "Name" in line: continue
        parts = re.split(r"\s{2,}", line.strip())
        if len(parts) >= 7 and parts[0].startswith(("graph_", "aten")):
            def ms(s): return float(s[:-2]) if s.endswith("ms") else float(s[:-2]) / 1000
            out[k]["rows"].append((parts[0], ms(parts[2]) / 10, int(parts[6])))
    return out
def group(name):
    m = re.search(r"gemm_m(\d+)n(\d+)k(\d+)", name)
    if m:
        mm, n, kk = map(int, m.groups())
        if n == 49152: return "lm head"
        if (n, kk) in ((1536, 576), (576, 1536)): return "mlp"
        if (n, kk) in ((576, 576), (192, 576)): return "qkvo"
        return "attention gemms"
    return "other kernels"
for path in sys.argv[1:]:
    d = parse(path)
    for k, v in d.items():
        g = {}
        for name, t, calls in v["rows"]:
            g[group(name)] = g.get(group(name), 0) + t
        print(path, f"k={k} median {v['median']}", {a: round(b, 2) for a, b in sorted(g.items())}, "sum", round(sum(g.values()), 2))
