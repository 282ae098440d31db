"""One GEMM's cost on this CPU, medians of repeated calls.
   python results/compiled_s44/mm.py        float32, 1 and 8 rows, the same matrix again and again (cache-resident
                                            but for the 113 MB head): MKL (torch.mm, F.linear) vs oneDNN over plain weights
   python results/compiled_s44/mm.py bf16   bfloat16, 1 row, many distinct matrices (streamed from memory, as in a
                                            model step): F.linear vs oneDNN over plain and prepacked weights"""
import sys, time
import torch
torch.set_num_threads(2)
onednn = torch.ops.mkldnn._linear_pointwise

def t(f, n, warm):
    for _ in range(warm): f()
    ts = []
    for _ in range(n):
        a = time.perf_counter(); f(); ts.append(time.perf_counter() - a)
    return sorted(ts)[n // 2] * 1e6

def fp32_same_matrix():
    for (K, N) in [(576, 1536), (1536, 576), (576, 49152)]:
        W = torch.randn(N, K)
        for M in (1, 8):
            x = torch.randn(M, K)
            with torch.no_grad():
                a = t(lambda: torch.mm(x, W.t()), 200, 20)
                b = t(lambda: torch.nn.functional.linear(x, W), 200, 20)
                c = t(lambda: onednn(x, W, None, "none", [], ""), 200, 20)
            print(K, N, "M", M, "mm %.0f us" % a, "F.linear %.0f us" % b, "mkldnn(plain W) %.0f us" % c, "mm GB/s %.1f" % (K * N * 4 / a / 1e3), flush=True)

def bf16_streamed():
    for (K, N) in [(576, 1536), (576, 49152)]:
        reps = max(1, 300_000_000 // (K * N * 2))
        Ws = [torch.randn(N, K).to(torch.bfloat16) for _ in range(reps)]
        packed = [torch.ops.mkldnn._reorder_linear_weight(W, 1) for W in Ws]
        x = torch.randn(1, K).to(torch.bfloat16)
        with torch.no_grad():
            a = t(lambda: [torch.nn.functional.linear(x, W) for W in Ws], 100, 10) / reps
            b = t(lambda: [onednn(x, W, None, "none", [], "") for W in Ws], 100, 10) / reps
            c = t(lambda: [onednn(x, W, None, "none", [], "") for W in packed], 100, 10) / reps
        gb = K * N * 2 / 1e3
        print(f"{K}x{N} bf16 M=1 (x{reps} distinct): F.linear {a:.0f} us {gb/a:.1f} GB/s | mkldnn plain {b:.0f} us {gb/b:.1f} GB/s | mkldnn prepacked {c:.0f} us {gb/c:.1f} GB/s", flush=True)

bf16_streamed() if sys.argv[1:] == ["bf16"] else fp32_same_matrix()
