import sys, time, torch
torch.set_num_threads(2)
K, N, M = map(int, sys.argv[1:4]); paths = sys.argv[4:]
x = torch.randint(-128, 128, (M, K), dtype=torch.int8)
cs = [torch._inductor.aoti_load_package(p) for p in paths]
outs = [c(x) for c in cs]
print("equal", all(torch.equal(outs[0], o) for o in outs))
ts = [[] for _ in cs]
for r in range(40):
    for i, c in enumerate(cs):
        t = time.perf_counter(); c(x); ts[i].append(time.perf_counter() - t)
for p, t in zip(paths, ts):
    t = sorted(t); print(f"{p.split('/')[-1]}: median {t[len(t)//2]*1e3:.2f} ms  p10 {t[4]*1e3:.2f}  p90 {t[-5]*1e3:.2f}")
