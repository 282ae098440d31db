import json, sys, collections
from fastforward.decoders.ngram import NGramIndex
recs = json.load(open(sys.argv[1])); G = 8
for ds in sorted({r["dataset"] for r in recs}) + ["all"]:
    st = collections.defaultdict(lambda: [0, [0]*G, [0]*G])  # n -> [matches, reached depth d, right at d]
    steps = 0
    for r in recs:
        if ds != "all" and r["dataset"] != ds: continue
        idx = NGramIndex(3, 1)
        seq = r["prompt"] + r["out"]; p = len(r["prompt"]); i = 0
        while i < len(r["out"]):
            idx.extend(seq[:p + i])
            t = idx.tokens; n_hit = 0; cont = []
            for n in range(min(3, len(t) - 1), 0, -1):
                s = idx.last.get(tuple(t[len(t) - n:]))
                if s is not None:
                    n_hit, cont = n, t[s + n: s + n + G]; break
            truth = r["out"][i:i + G]
            acc = 0
            while acc < min(len(cont), len(truth)) and cont[acc] == truth[acc]: acc += 1
            e = st[n_hit]; e[0] += 1
            for d in range(min(len(cont), acc + 1)):
                e[1][d] += 1
                if d < acc: e[2][d] += 1
            i += 1  # every position (not the pld walk): conditional rates
            steps += 1
    print(f"== {ds}: {steps} positions")
    for n in sorted(st):
        m, reach, right = st[n]
        rates = " ".join(f"{right[d]/reach[d]:.2f}" if reach[d] else "  - " for d in range(G))
        print(f"  n={n}: {m:5d} ({m/steps:.0%})  P(right at depth | reached) {rates}  mean accepted(g=8) {sum(right)/m:.2f}")
