/* ggml-vulkan 0.25.1 on lavapipe: a sequence of small graph cases run the way the harness' graph tier runs
 * them (each case three times: inputs and nodes in two no-alloc contexts with a buffer each, all nodes
 * outputs with their own buffers, then nodes placed by ggml_gallocr; outputs and inputs read back; every
 * buffer freed after its run) corrupts the heap, with no ARGSORT and no RMS_NORM in any graph. Correct API use
 * only. Hand-built from `conform repro --history ... --emit-c` of the crash records of ssm_conv_silu,
 * mul_mat_add-f16 and gate_up_glu-f16 (docs/findings-vulkan.md, "Graph tier"); data are a fixed LCG, not the
 * harness's draws.
 *
 * Mechanism, under valgrind 3.19 (deterministic where the crash is not): lavapipe's queue thread reads, and
 * then frees a second time, the 496-byte object lavapipe allocated for a VkBuffer that ggml_vk_create_buffer
 * made for an earlier run's ggml buffer, after ggml_backend_buffer_free (or ggml_gallocr_free) destroyed it:
 * "Invalid read of size 4 ... 0 bytes inside a block of size 496 free'd" then "Invalid free()", in Thread 2,
 * libvulkan_lvp.so only. The same reads appear in repro/vulkan_argsort_after_unary_heap.c. The abort (malloc's
 * "corrupted double-linked list", "unsorted double linked list corrupted", SIGSEGV) needs the freed chunk to
 * have been reused by then, hence rates well below 1; the use-after-free itself is in every such run.
 *
 * Measured here (lavapipe, LLVM 15.0.6, both cores busy with other runs), crashes per tries, Vulkan0 / the
 * folder's CPU / Vulkan0 with every case's context buffers kept to the end (suffix "!"; gallocr's still freed):
 *   ssm_silu:3,2 ssm_add_silu:3,16 ssm_silu:3,16                            10/20  0/5  0/20
 *     (the same without the middle case's ADD, ssm_silu three times: 0/10)
 *   mm16_add:450,54,11 mm16_add:450,54,2 mm16_add:450,11,11 mm16_add:450,1,11 mm16_add:2,68,15
 *                                                                            5/20  0/5  0/20
 *   glu16:1,1,1 glu16:181,2,10 glu16:31,1,1 glu16:31,14,9                     9/20  0/5  0/20
 *   mm_add (f32 weights), the mm16_add shapes                                 3/20
 * (the harness: mul_mat_add-f32 0 of 30 cases crashed, -f16 5 of 44: f32 weights make the abort rarer, not
 * the damage.) Under valgrind, errors (all of them the 496-byte use-after-free and one invalid free):
 * the glu16 sequence 146; mm16_add's first two cases 66 and mm_add's (f32) 66; those two cases with gallocr
 * runs only (MODES=2) 0, own-buffer runs only (MODES=0) 0, one case's three runs 0, gallocr then own buffers
 * (MODES=20) 32 and with "!" 0; SOFT_MAX then SIGMOID graphs, own buffers freed, 0.
 *
 * llama.cpp b8121 (node-llama-cpp 3.16.2, ggml 0.9.7; L=.backends/vulkan-3.16.2, -l:libggml.vulkan.b8121.so):
 *   ssm_silu:3,2 ssm_add_silu:3,16 ssm_silu:3,16 6/6, with GGML_VK_DISABLE_FUSION=1 3/4, "!" 0/6, CPU 0/3;
 *   the glu16 sequence 2/6 (docs/findings-vulkan.md, "b8121's graph tier").
 * Build and run (headers: the libggml-python wheel's include/, same prototypes as 0.25.1):
 *   L=$PWD/.backends/ggml-0.25.1-vulkan
 *   gcc -O1 -o vk-seq repro/vulkan_graph_sequence_heap.c -I.venv/lib/python3.11/site-packages/libggml/include \
 *       -L$L -l:libggml.vulkan.v0.5.0.so -l:libggml-base.so -Wl,-rpath,$L
 *   ./vk-seq $L Vulkan0 ssm_silu:3,2 ssm_add_silu:3,16 ssm_silu:3,16      # DEVICE: Vulkan0 | CPU
 * A case is KIND:A,B[,C] and runs three times (MODES=012 by default: 0 own buffers, 1 every node an output,
 * 2 gallocr); a trailing "!" keeps its context buffers until the end. Kinds, f16 weights where "16":
 *   ssm_silu:d_conv,n_t       silu(ssm_conv(sx[d_conv-1+n_t,1], c[d_conv,1]))
 *   ssm_add_silu:d_conv,n_t   the same with ADD of a one-element bias between
 *   mm_add:k,m,n  mm16_add    mul_mat(w[k,m], x[k,n]) + bias[m]
 *   glu:k,f,n     glu16       swiglu_split(mul_mat(w_gate[k,f], x[k,n]), mul_mat(w_up[k,f], x[k,n]))
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

static unsigned lcg = 1;

static void fill(struct ggml_tensor *t) {
    size_t n = ggml_nelements(t);
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) { lcg = lcg * 1103515245u + 12345u; v[i] = (float)((lcg >> 8) % 2001) / 1000.0f - 1.0f; }
    if (t->type == GGML_TYPE_F16) {
        ggml_fp16_t *h = malloc(n * sizeof *h);
        for (size_t i = 0; i < n; i++) h[i] = ggml_fp32_to_fp16(v[i]);
        ggml_backend_tensor_set(t, h, 0, n * sizeof *h);
        free(h);
    } else {
        ggml_backend_tensor_set(t, v, 0, n * sizeof *v);
    }
    free(v);
}

static void read_back(struct ggml_tensor *t) {
    void *h = malloc(ggml_nbytes(t));
    ggml_backend_tensor_get(t, h, 0, ggml_nbytes(t));
    free(h);
}

static ggml_backend_buffer_t kept[1024];  /* buffers of "!" cases, freed at the end */
static int n_kept;

enum mode { OWN_BUFFERS, ALL_OUTPUTS, GALLOCR };

static void run(ggml_backend_t backend, const char *spec, enum mode mode) {
    char kind[32] = "";
    long a = 1, b = 1, c = 1;
    int keep = strchr(spec, '!') != NULL;
    if (sscanf(spec, "%31[a-z_0-9]:%ld,%ld,%ld", kind, &a, &b, &c) < 3) { fprintf(stderr, "bad case %s\n", spec); exit(2); }
    struct ggml_init_params ip = { 16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context *in_ctx = ggml_init(ip), *node_ctx = ggml_init(ip);
    struct ggml_tensor *inputs[4], *out;
    int n_in = 0;
    enum ggml_type wtype = strstr(kind, "16") ? GGML_TYPE_F16 : GGML_TYPE_F32;
    if (!strcmp(kind, "ssm_silu") || !strcmp(kind, "ssm_add_silu")) {
        struct ggml_tensor *sx = inputs[n_in++] = ggml_new_tensor_2d(in_ctx, GGML_TYPE_F32, a - 1 + b, 1);
        struct ggml_tensor *cw = inputs[n_in++] = ggml_new_tensor_2d(in_ctx, GGML_TYPE_F32, a, 1);
        out = ggml_ssm_conv(node_ctx, sx, cw);
        if (kind[4] == 'a') out = ggml_add(node_ctx, out, inputs[n_in++] = ggml_new_tensor_1d(in_ctx, GGML_TYPE_F32, 1));
        out = ggml_silu(node_ctx, out);
    } else if (!strcmp(kind, "mm_add") || !strcmp(kind, "mm16_add")) {
        struct ggml_tensor *w = inputs[n_in++] = ggml_new_tensor_2d(in_ctx, wtype, a, b);
        struct ggml_tensor *x = inputs[n_in++] = ggml_new_tensor_2d(in_ctx, GGML_TYPE_F32, a, c);
        out = ggml_add(node_ctx, ggml_mul_mat(node_ctx, w, x), inputs[n_in++] = ggml_new_tensor_1d(in_ctx, GGML_TYPE_F32, b));
    } else if (!strcmp(kind, "glu") || !strcmp(kind, "glu16")) {
        struct ggml_tensor *w_gate = inputs[n_in++] = ggml_new_tensor_2d(in_ctx, wtype, a, b);
        struct ggml_tensor *x = inputs[n_in++] = ggml_new_tensor_2d(in_ctx, GGML_TYPE_F32, a, c);
        struct ggml_tensor *w_up = inputs[n_in++] = ggml_new_tensor_2d(in_ctx, wtype, a, b);
        out = ggml_swiglu_split(node_ctx, ggml_mul_mat(node_ctx, w_gate, x), ggml_mul_mat(node_ctx, w_up, x));
    } else {
        fprintf(stderr, "unknown kind %s\n", kind);
        exit(2);
    }
    ggml_set_output(out);
    struct ggml_cgraph *graph = ggml_new_graph(node_ctx);
    ggml_build_forward_expand(graph, out);
    if (mode == ALL_OUTPUTS) for (int i = 0; i < ggml_graph_n_nodes(graph); i++) ggml_set_output(ggml_graph_node(graph, i));
    ggml_backend_buffer_t in_buf = ggml_backend_alloc_ctx_tensors(in_ctx, backend), node_buf = NULL;
    ggml_gallocr_t galloc = NULL;
    if (mode == GALLOCR) {
        for (int i = 0; i < n_in; i++) ggml_set_input(inputs[i]);
        galloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend));
        ggml_gallocr_alloc_graph(galloc, graph);
    } else {
        node_buf = ggml_backend_alloc_ctx_tensors(node_ctx, backend);
    }
    for (int i = 0; i < n_in; i++) fill(inputs[i]);
    int status = ggml_backend_graph_compute(backend, graph);
    printf("%s run %d: status %d\n", spec, (int)mode, status);
    fflush(stdout);
    for (int i = 0; i < ggml_graph_n_nodes(graph); i++)
        if (ggml_graph_node(graph, i)->flags & GGML_TENSOR_FLAG_OUTPUT) read_back(ggml_graph_node(graph, i));
    for (int i = 0; i < n_in; i++) read_back(inputs[i]);
    if (galloc) ggml_gallocr_free(galloc);
    if (keep) { kept[n_kept++] = in_buf; if (node_buf) kept[n_kept++] = node_buf; }
    else { ggml_backend_buffer_free(in_buf); if (node_buf) ggml_backend_buffer_free(node_buf); }
    ggml_free(node_ctx);
    ggml_free(in_ctx);
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s GGML_LIB_DIR DEVICE CASE...\n", argv[0]); return 2; }
    setenv("GGML_VK_VISIBLE_DEVICES", "0", 0);  /* lavapipe is a CPU-type Vulkan device */
    ggml_backend_load_all_from_path(argv[1]);
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(argv[2]);
    if (!dev) { fprintf(stderr, "no device %s\n", argv[2]); return 2; }
    ggml_backend_t backend = ggml_backend_dev_init(dev, NULL);
    const char *modes = getenv("MODES") ? getenv("MODES") : "012";
    if (strspn(modes, "012") != strlen(modes)) { fprintf(stderr, "MODES is digits 0, 1, 2\n"); return 2; }
    if (argc - 3 > (int)(sizeof kept / sizeof kept[0]) / 6) { fprintf(stderr, "too many cases\n"); return 2; }
    for (int i = 3; i < argc; i++)
        for (const char *m = modes; *m; m++) run(backend, argv[i], (enum mode)(*m - '0'));
    for (int i = 0; i < n_kept; i++) ggml_backend_buffer_free(kept[i]);
    ggml_backend_free(backend);
    printf("done\n");
    return 0;
}
