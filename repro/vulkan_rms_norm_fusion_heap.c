/* Standalone repro, outside the harness, of the heap corruption ggml-vulkan 0.25.1 shows on lavapipe
 * when RMS_NORM+MUL+ADD graphs of two shapes are computed in turn, each once with fusion allowed and
 * once with every node flagged an output (fusion blocked). Public ggml API only; no Python.
 * The two graphs are the harness's
 *   GRAPH[rms_norm_mul_add](type=f32,ne=[45,1,1,1],w=full,order=xw,eps=1e-05,b=row,...)
 *   GRAPH[rms_norm_mul_add](type=f32,ne=[1,32,1,1],w=full,order=wx,eps=1e-05,b=row,...)
 * Build and run: see docs/findings-vulkan.md ("Graph tier"), or repro/build-vulkan-repro.sh.
 * llama.cpp b8121 (.backends/vulkan-3.16.2, -l:libggml.vulkan.b8121.so; set GGML_VK_VISIBLE_DEVICES=0 or
 * lavapipe is not listed), 40 passes under glibc's malloc checking: harness 3/3 abort, mixed 1/3; harness with
 * GGML_VK_DISABLE_FUSION=1 0/3, fused 0/3, blocked 0/3, CPU 0/2.
 * Usage: vulkan_rms_norm_fusion_heap LIBDIR [PASSES] [MODE]; MODE is "mixed" (fused then blocked, the
 * failing order), "fused" or "blocked" (controls), or "harness" (mixed plus the gallocr run, supports_op
 * and every read-back, the whole sequence of the harness' run_graph). Exit 0: all passes survived. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

static int read_back_all;  /* MODE "harness": also supports_op, read-backs and the gallocr run */

struct shape { int64_t ne0, ne1; int swap; };  /* x and w are [ne0,ne1]; b is one row [ne0,1] */

static void fill(struct ggml_tensor *t, unsigned seed) {
    size_t n = ggml_nelements(t);
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { seed = seed * 1103515245u + 12345u; v[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f; }
    ggml_backend_tensor_set(t, v, 0, n * sizeof(float));
    free(v);
}

enum run { FUSED, BLOCKED, GALLOCR };

static void read_back(struct ggml_tensor *t) {
    float *v = malloc(ggml_nbytes(t));
    ggml_backend_tensor_get(t, v, 0, ggml_nbytes(t));
    free(v);
}

static void run_once(ggml_backend_t backend, struct shape s, enum run run, unsigned seed) {
    int blocked = run == BLOCKED;
    /* inputs and nodes in two no_alloc contexts, each given its own backend buffer, as the harness does */
    struct ggml_init_params p = { ggml_tensor_overhead() * 16 + ggml_graph_overhead_custom(64, false), NULL, true };
    struct ggml_context *in_ctx = ggml_init(p), *node_ctx = ggml_init(p);
    struct ggml_tensor *x = ggml_new_tensor_2d(in_ctx, GGML_TYPE_F32, s.ne0, s.ne1);
    struct ggml_tensor *w = ggml_new_tensor_2d(in_ctx, GGML_TYPE_F32, s.ne0, s.ne1);
    struct ggml_tensor *b = ggml_new_tensor_2d(in_ctx, GGML_TYPE_F32, s.ne0, 1);
    struct ggml_tensor *n0 = ggml_rms_norm(node_ctx, x, 1e-5f);
    struct ggml_tensor *n1 = s.swap ? ggml_mul(node_ctx, w, n0) : ggml_mul(node_ctx, n0, w);
    struct ggml_tensor *n2 = ggml_add(node_ctx, n1, b);
    if (blocked) { ggml_set_output(n0); ggml_set_output(n1); }
    ggml_set_output(n2);
    struct ggml_cgraph *g = ggml_new_graph_custom(node_ctx, 64, false);
    ggml_build_forward_expand(g, n2);
    ggml_backend_buffer_t bin = ggml_backend_alloc_ctx_tensors(in_ctx, backend), bnode = NULL;
    ggml_gallocr_t galloc = NULL;
    if (run == GALLOCR) {  /* the nodes placed by ggml's graph allocator, as the harness' third run */
        ggml_set_input(x); ggml_set_input(w); ggml_set_input(b);
        galloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend));
        if (!galloc || !ggml_gallocr_alloc_graph(galloc, g)) { fprintf(stderr, "gallocr failed\n"); exit(3); }
    } else {
        bnode = ggml_backend_alloc_ctx_tensors(node_ctx, backend);
    }
    if (!bin || (!bnode && !galloc)) { fprintf(stderr, "allocation failed\n"); exit(3); }
    if (read_back_all && run == FUSED)
        for (int i = 0; i < ggml_graph_n_nodes(g); i++)
            if (!ggml_backend_supports_op(backend, ggml_graph_node(g, i))) { fprintf(stderr, "unsupported\n"); exit(3); }
    fill(x, seed); fill(w, seed + 1); fill(b, seed + 2);
    if (ggml_backend_graph_compute(backend, g) != GGML_STATUS_SUCCESS) { fprintf(stderr, "compute failed\n"); exit(3); }
    if (read_back_all) {
        if (blocked) { read_back(n0); read_back(n1); }
        read_back(n2); read_back(x); read_back(w); read_back(b);
    }
    if (galloc) ggml_gallocr_free(galloc);
    ggml_backend_buffer_free(bin);
    if (bnode) ggml_backend_buffer_free(bnode);
    ggml_free(node_ctx);
    ggml_free(in_ctx);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s LIBDIR [PASSES] [mixed|fused|blocked|harness] [DEVICE]\n", argv[0]); return 2; }
    int passes = argc > 2 ? atoi(argv[2]) : 40;
    const char *mode = argc > 3 ? argv[3] : "mixed";
    read_back_all = strcmp(mode, "harness") == 0;
    ggml_backend_load_all_from_path(argv[1]);
    const char *dev_name = argc > 4 ? argv[4] : "Vulkan0";  /* "CPU": the control */
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(dev_name);
    if (!dev) { fprintf(stderr, "no %s device in %s\n", dev_name, argv[1]); return 2; }
    ggml_backend_t backend = ggml_backend_dev_init(dev, NULL);
    struct shape shapes[2] = { {45, 1, 0}, {1, 32, 1} };
    for (int pass = 0; pass < passes; pass++) {
        for (int k = 0; k < 2; k++) {
            if (strcmp(mode, "blocked") != 0) run_once(backend, shapes[k], FUSED, 17u * pass + k);
            if (strcmp(mode, "fused") != 0) run_once(backend, shapes[k], BLOCKED, 17u * pass + k);
            if (read_back_all) run_once(backend, shapes[k], GALLOCR, 17u * pass + k);
        }
        fprintf(stderr, "pass %d ok\n", pass + 1);
    }
    ggml_backend_free(backend);
    printf("%s: %d passes survived\n", mode, passes);
    return 0;
}
