/* ggml-vulkan 0.25.1 on lavapipe: two small graphs computed in turn in one process, each an
 * element-wise op feeding ARGSORT, crash lavapipe's queue thread (SIGSEGV) in the second compute.
 * Correct API use only: inputs in one no-alloc context and buffer, nodes in another; everything of
 * the first graph is freed before the second is built. Narrowed (conform repro --emit-c, then line
 * removal) from the harness's topk_moe 3-case sequence; also with GGML_VK_DISABLE_FUSION=1; never on
 * ggml's CPU device of the same folder.
 *
 * Measured here (lavapipe, LLVM 15.0.6), crashes per tries: as written 10/10 (5 with fusion off, 5 on),
 * CPU 0/3. Needs: the first graph's input buffer freed (kept alive: 0/4; node buffer kept alive: 4/4);
 * SOFT_MAX before the first ARGSORT (SCALE there: 0/4; SOFT_MAX alone, no ARGSORT: 0/4); an op before
 * the second ARGSORT (SIGMOID or SCALE: 4/4; SOFT_MAX: 0/4; ARGSORT of the input itself: 0/5); ARGSORT
 * in both (SUM_ROWS instead: 0/4); the second graph alone: 0/3. Sizes and order do not matter
 * (second [64,7], first [128,1], ascending: each 3/3 or 4/4).
 *
 * Build and run (headers: the libggml-python wheel's include/, same prototypes as 0.25.1):
 *   L=$PWD/.backends/ggml-0.25.1-vulkan
 *   gcc -O1 -o vk-argsort repro/vulkan_argsort_after_unary_heap.c \
 *       -I.venv/lib/python3.11/site-packages/libggml/include \
 *       -L$L -l:libggml.vulkan.v0.5.0.so -l:libggml-base.so -Wl,-rpath,$L
 *   ./vk-argsort $L Vulkan0      # DEVICE: Vulkan0 | CPU
 */
#include <stdio.h>
#include <stdlib.h>
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

/* one graph: x[ncols, nrows] -> softmax or sigmoid -> argsort (descending) */
static void run(ggml_backend_t backend, int softmax, int64_t ncols, int64_t nrows) {
    struct ggml_init_params ip = { 16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context *in_ctx = ggml_init(ip), *node_ctx = ggml_init(ip);
    struct ggml_tensor *x = ggml_new_tensor_2d(in_ctx, GGML_TYPE_F32, ncols, nrows);
    struct ggml_tensor *p = softmax ? ggml_soft_max_ext(node_ctx, x, NULL, 1.0f, 0.0f) : ggml_sigmoid(node_ctx, x);
    struct ggml_tensor *order = ggml_argsort(node_ctx, p, GGML_SORT_ORDER_DESC);
    struct ggml_cgraph *graph = ggml_new_graph_custom(node_ctx, 64, false);
    ggml_build_forward_expand(graph, order);
    ggml_backend_buffer_t in_buf = ggml_backend_alloc_ctx_tensors(in_ctx, backend);
    ggml_backend_buffer_t node_buf = ggml_backend_alloc_ctx_tensors(node_ctx, backend);
    float *v = malloc(ncols * nrows * sizeof *v);
    for (int64_t i = 0; i < ncols * nrows; i++) v[i] = (float)((i * 7919) % 1000) / 250.0f - 2.0f;
    ggml_backend_tensor_set(x, v, 0, ggml_nbytes(x));
    int status = ggml_backend_graph_compute(backend, graph);
    printf("%s [%lld, %lld] -> argsort: status %d\n", softmax ? "softmax" : "sigmoid", (long long)ncols,
           (long long)nrows, status);
    fflush(stdout);
    free(v);
    ggml_backend_buffer_free(in_buf);
    ggml_backend_buffer_free(node_buf);
    ggml_free(node_ctx);
    ggml_free(in_ctx);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s GGML_LIB_DIR DEVICE\n", argv[0]); return 2; }
    setenv("GGML_VK_VISIBLE_DEVICES", "0", 0);  /* lavapipe is a CPU-type Vulkan device */
    ggml_backend_load_all_from_path(argv[1]);
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(argv[2]);
    if (!dev) { fprintf(stderr, "no device %s\n", argv[2]); return 2; }
    ggml_backend_t backend = ggml_backend_dev_init(dev, NULL);
    run(backend, 1, 60, 1);
    run(backend, 0, 128, 7);  /* lavapipe's queue thread dies in here */
    ggml_backend_free(backend);
    printf("done\n");
    return 0;
}
