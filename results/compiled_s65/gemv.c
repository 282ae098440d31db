// Does an 8-row fp32 panel GEMM overlap its weight stream with its FMAs on this CPU?
// W: COPIES matrices of K x N fp32, packed in panels [N/NR][K][NR]; rows R in {1,2,4,8}.
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define K 576
#define N 1536
#define NR 48
#define V (NR / 16)
#ifndef COPIES
#define COPIES 32
#endif

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

#define PANEL(R)                                                                      \
static void panel_##R(const float *restrict w, const float *restrict x, float *restrict y, int pf) { \
    __m512 acc[R][V];                                                                 \
    for (int r = 0; r < R; r++) for (int v = 0; v < V; v++) acc[r][v] = _mm512_setzero_ps(); \
    for (int k = 0; k < K; k++) {                                                     \
        const float *wk = w + (size_t)k * NR;                                          \
        if (pf) { for (int v = 0; v < V; v++) _mm_prefetch((const char *)(wk + pf * NR + 16 * v), _MM_HINT_T0); } \
        __m512 b[V];                                                                  \
        for (int v = 0; v < V; v++) b[v] = _mm512_loadu_ps(wk + 16 * v);              \
        for (int r = 0; r < R; r++) {                                                 \
            __m512 a = _mm512_set1_ps(x[r * K + k]);                                  \
            for (int v = 0; v < V; v++) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]); \
        }                                                                             \
    }                                                                                 \
    for (int r = 0; r < R; r++) for (int v = 0; v < V; v++) _mm512_storeu_ps(y + r * N + 16 * v, acc[r][v]); \
}
PANEL(1) PANEL(2) PANEL(4) PANEL(8)

// stream only: the same loads, one add per vector (no rows)
static void panel_0(const float *restrict w, const float *restrict x, float *restrict y, int pf) {
    __m512 acc[V];
    for (int v = 0; v < V; v++) acc[v] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) { const float *wk = w + (size_t)k * NR; for (int v = 0; v < V; v++) acc[v] = _mm512_add_ps(acc[v], _mm512_loadu_ps(wk + 16 * v)); }
    for (int v = 0; v < V; v++) _mm512_storeu_ps(y + 16 * v, acc[v]);
}
// arithmetic only: 8 rows of FMAs on one panel that stays in L1/L2 (no stream)
typedef void (*panel_fn)(const float *, const float *, float *, int);

static void gemm(panel_fn f, const float *w, const float *x, float *y, int pf) {
    #pragma omp parallel for schedule(static)
    for (int p = 0; p < N / NR; p++) f(w + (size_t)p * K * NR, x, y + p * NR, pf);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    size_t per = (size_t)K * N;
    float *w = aligned_alloc(64, per * COPIES * sizeof(float));
    for (size_t i = 0; i < per * COPIES; i++) w[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
    float *x = aligned_alloc(64, 8 * K * sizeof(float)), *y = aligned_alloc(64, 8 * N * sizeof(float));
    for (int i = 0; i < 8 * K; i++) x[i] = 0.001f * i;
    panel_fn fs[] = {panel_0, panel_1, panel_2, panel_4, panel_8};
    const char *names[] = {"stream", "R1", "R2", "R4", "R8"};
    int pfs[] = {0, 8, 32};
    printf("threads %d, %d copies of %dx%d fp32 (%.1f MB each), panels of %d\n", omp_get_max_threads(), COPIES, K, N, per * 4 / 1e6, NR);
    for (int round = 0; round < 3; round++) {
        for (int ip = 0; ip < 3; ip++) {
            for (int i = 0; i < 5; i++) {
                // warm
                for (int c = 0; c < COPIES; c++) gemm(fs[i], w + c * per, x, y, pfs[ip]);
                double best = 1e9, sum = 0;
                for (int r = 0; r < reps; r++) {
                    double t0 = now();
                    for (int c = 0; c < COPIES; c++) gemm(fs[i], w + c * per, x, y, pfs[ip]);
                    double dt = (now() - t0) / COPIES;
                    sum += dt; if (dt < best) best = dt;
                }
                printf("round %d pf %2d %-6s best %6.1f us  mean %6.1f us  (%.1f GB/s best)\n", round, pfs[ip], names[i], best * 1e6, sum / reps * 1e6, per * 4 / best / 1e9);
            }
        }
    }
    return 0;
}
