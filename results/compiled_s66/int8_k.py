"""Session 66 probe: does the 2+-row W8A8 product with a long K (the 1.5B's down projection, K=8960) now run
faster on inductor's VNNI template (shift_rows with no K limit) than on oneDNN's prepacked linear, with the g++
front (fastforward.core.cxx)? Session 63 measured 9.8 against 7.8 ms for 8 products over 8 rows, before the front
(results/compiled_s63/int8_8rows.txt), and so kept K > 2048 on oneDNN (int8_gemm.SHIFT_MAX_K).

build: python int8_k.py build FORM FRONT K N M L OUT   (FORM: shift | aten; FRONT: 1 | 0)
ab:    python int8_k.py ab K N M L PKG...                (alternating calls in one process, 40 rounds)
Same production passes as a 1.5B W8A8 package (int8_gemm.shift_rows / rewrite with aten_only), same backend
(the templates: "CPP"), weights random int8 past the 32 MB L3 (L distinct layers)."""
import sys
import time

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from fastforward.core import cxx
from fastforward.core import int8_gemm as ig

torch.set_num_threads(2)


class Pass(CustomGraphPass):
    def __init__(self, form: str) -> None:
        self.form = form

    def __call__(self, graph) -> None:
        if self.form == "shift":
            print("shifted", ig.shift_rows(graph, max_k=10**9), file=sys.stderr)
        ig.rewrite(graph, ig.MIN_ROWS, 0, aten_only=True)

    def uuid(self) -> str:
        return f"s66-{self.form}-{time.time()}"


class Mod(torch.nn.Module):
    def __init__(self, k: int, n: int, layers: int) -> None:
        super().__init__()
        for i in range(layers):
            self.register_buffer(f"w{i}", torch.randint(-127, 128, (n, k), dtype=torch.int8))
        self.layers = layers

    def forward(self, x):
        out = None
        for i in range(self.layers):
            y = torch._int_mm(x, getattr(self, f"w{i}").t())
            out = y if out is None else out + y
        return out


def build(form: str, front: str, k: int, n: int, m: int, layers: int, out: str) -> None:
    torch.manual_seed(0)
    mod = Mod(k, n, layers).eval()
    x = torch.randint(-128, 128, (m, k), dtype=torch.int8)
    x[0] = 127
    ref = mod(x)
    opts = {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP",
            "cpp.weight_prepack": True, "post_grad_custom_post_pass": Pass(form)}
    if front == "1":
        opts["cpp.cxx"] = (None, cxx.chosen())
    with torch.no_grad():
        prog = torch.export.export(mod, (x,), strict=False)
        t0 = time.time()
        path = torch._inductor.aoti_compile_and_package(prog, package_path=out, inductor_configs=opts)
        c = torch._inductor.aoti_load_package(path)
        print(f"{out}: form={form} front={front} equal={torch.equal(c(x), ref)} built {time.time() - t0:.0f}s")


def ab(k: int, n: int, m: int, layers: int, paths: list[str]) -> None:
    x = torch.randint(-128, 128, (m, k), dtype=torch.int8)
    cs = [torch._inductor.aoti_load_package(p) for p in paths]
    outs = [c(x) for c in cs]
    print("equal", all(torch.equal(outs[0], o) for o in outs))
    ts = [[] for _ in cs]
    for _ in range(40):
        for i, c in enumerate(cs):
            t = time.perf_counter()
            c(x)
            ts[i].append(time.perf_counter() - t)
    for p, t in zip(paths, ts):
        t = sorted(t)
        print(f"K={k} N={n} M={m} L={layers} {p.split('/')[-1]}: median {t[20] * 1e3:.2f} ms "
              f"p10 {t[4] * 1e3:.2f} p90 {t[-5] * 1e3:.2f}")


if __name__ == "__main__":
    if sys.argv[1] == "build":
        form, front = sys.argv[2], sys.argv[3]
        k, n, m, layers = map(int, sys.argv[4:8])
        build(form, front, k, n, m, layers, sys.argv[8])
    else:
        k, n, m, layers = map(int, sys.argv[2:6])
        ab(k, n, m, layers, sys.argv[6:])
