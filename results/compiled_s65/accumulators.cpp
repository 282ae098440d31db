// The form of inductor's float32 8-row GEMM micro-kernel, reduced (session 65; gemm_probe.md section 2).
// tests/test_cxx.py compiles the same text (KERNEL) as the front's regression test: change both together.
// g++ -O3 -std=c++17 -mavx512f -mavx512dq -mavx512vl -mavx512bw -mfma -DCPU_CAPABILITY_AVX512 -I<torch include> -c
// gives 24 stack stores in the K loop; with -fno-tree-loop-distribute-patterns --param max-completely-peel-times=64, none.
#include <ATen/cpu/vec/vec.h>
#include <c10/util/Unroll.h>
template <int ROWS, int COLS>
inline void kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, long K) {
    using V = at::vec::Vectorized<float>;
    V va;
    at::vec::VectorizedN<float, COLS> vb;
    at::vec::VectorizedN<float, ROWS * COLS> vc;
    auto zero = [&](auto i) { vc[i] = V(0.0f); };
    c10::ForcedUnroll<ROWS * COLS>{}(zero);
    auto compute = [&](auto i, long k) {
        constexpr int row = i / COLS, col = i % COLS;
        if constexpr (col == 0) { va = V(A[row * K + k]); }
        if constexpr (row == 0) { vb[col] = V::loadu(B + k * COLS * 16 + col * 16); }
        vc[i] = at::vec::fmadd(va, vb[col], vc[i]);
    };
    for (long k = 0; k < K; ++k) { c10::ForcedUnroll<ROWS * COLS>{}(compute, k); }
    auto store = [&](auto i) { vc[i].store(C + i * 16); };
    c10::ForcedUnroll<ROWS * COLS>{}(store);
}
template void kernel<8, 3>(const float*, const float*, float*, long);
