/*
 * TEST DOUBLE: a fake of the CANN runtime and aclnn libraries, for the binding tests only.
 *
 * Written from the prototypes in the project's acl-facts notes; it shares no code with CANN.
 * Device memory is host memory. Every call appends one line to a log ("name(arg=value, ...) -> ret"),
 * which the tests read through fake_log(); fake_fail() makes the n-th next call of a function
 * fail with a chosen status. The aclnn ops compute on host memory so the device-level tests can
 * compare the acl:N device's results with numpy.
 *
 * One source, three libraries (like the real split): compiled with
 *   -DFAKE_PART_RUNTIME  -> libascendcl.so (holds all shared state and the fake_* controls)
 *   -DFAKE_PART_NNOPBASE -> libnnopbase.so (descriptors; links against libascendcl)
 *   -DFAKE_PART_OPAPI    -> libopapi.so    (ops; links against libascendcl and libnnopbase)
 * -DFAKE_NO_VERSION_STR leaves out aclsysGetVersionStr (an older CANN).
 * Single-threaded by design: the tests drive it from one thread.
 */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int aclError;
typedef int32_t aclnnStatus;
typedef void *aclrtStream;

/* ---- controls and shared state (defined in the runtime part, declared for the others) ---- */
EXPORT void fake_record(const char *fmt, ...);
EXPORT int fake_should_fail(const char *name);
EXPORT void fake_set_error(const char *fmt, ...);
EXPORT int fake_is_device_range(const void *ptr, size_t size);
EXPORT void fake_count(const char *what, int delta);
EXPORT uint64_t fake_get_workspace_size(void);

#define MAX_DIMS 8

/* The descriptor layouts are shared by nnopbase (creates them) and opapi (reads them). */
typedef struct {
    uint32_t magic;
    uint64_t ndim;
    int64_t dims[MAX_DIMS];
    int64_t strides[MAX_DIMS];
    int64_t offset;
    int dtype;
    int format;
    uint64_t storage_ndim;
    int64_t storage[MAX_DIMS];
    void *data;
} FakeTensor;

typedef struct {
    uint32_t magic;
    int dtype;
    double value;
} FakeScalar;

typedef struct {
    uint32_t magic;
    uint64_t size;
    int64_t values[];
} FakeIntArray;

#define TENSOR_MAGIC 0x7e450001u
#define SCALAR_MAGIC 0x7e450002u
#define INTARRAY_MAGIC 0x7e450003u
#define FLOATARRAY_MAGIC 0x7e450004u
#define BOOLARRAY_MAGIC 0x7e450005u
#define EXECUTOR_MAGIC 0x7e450006u
#define DEAD_MAGIC 0xdeadu

enum { ACL_FLOAT = 0, ACL_FLOAT16 = 1, ACL_INT8 = 2, ACL_INT32 = 3, ACL_INT64 = 9, ACL_BOOL = 12,
       ACL_BF16 = 27 };

#define ACLNN_ERR_PARAM_NULLPTR 161001
#define ACLNN_ERR_PARAM_INVALID 161002

#ifdef FAKE_PART_RUNTIME
/* ===================================== runtime part ===================================== */
#define ACL_ERROR_INVALID_PARAM 100000
#define ACL_ERROR_UNINITIALIZE 100001
#define ACL_ERROR_REPEAT_INITIALIZE 100002
#define ACL_ERROR_REPEAT_FINALIZE 100037
#define ACL_ERROR_RT_PARAM_INVALID 107000
#define ACL_ERROR_RT_INVALID_DEVICEID 107001
#define ACL_ERROR_RT_CONTEXT_NULL 107002
#define ACL_ERROR_RT_INVALID_HANDLE 107017
#define ACL_ERROR_RT_MEMORY_FREE 207002

static char *g_log;
static size_t g_log_len, g_log_cap;
static char g_error[512];
static char g_soc[64] = "Ascend910B3";
static char g_version[128] = "8.0.RC2";
static uint32_t g_device_count = 2;
static uint64_t g_workspace_size = 256;
static int g_initialized;
static int g_current_device = -1;
static int g_device_refs[64];
static const size_t g_total_memory = 64u << 20;

#define MAX_RULES 32
static struct { char name[64]; int countdown; int code; } g_rules[MAX_RULES];

#define MAX_ALLOCS 4096
static struct { char *ptr; size_t size; } g_allocs[MAX_ALLOCS];
static size_t g_alloc_bytes;

#define MAX_STREAMS 64
static void *g_streams[MAX_STREAMS];

static int g_live_descriptors, g_live_executors;

EXPORT void fake_record(const char *fmt, ...) {
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (g_log_len + (size_t)n + 1 > g_log_cap) {
        g_log_cap = (g_log_cap + (size_t)n + 1) * 2;
        g_log = realloc(g_log, g_log_cap);
    }
    memcpy(g_log + g_log_len, line, (size_t)n);
    g_log_len += (size_t)n;
    g_log[g_log_len] = 0;
}

EXPORT void fake_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
}

EXPORT int fake_should_fail(const char *name) {
    for (int i = 0; i < MAX_RULES; i++) {
        if (g_rules[i].countdown > 0 && strcmp(g_rules[i].name, name) == 0) {
            if (--g_rules[i].countdown == 0) {
                fake_set_error("fake: %s failed as instructed (code %d)", name, g_rules[i].code);
                return g_rules[i].code ? g_rules[i].code : -1;
            }
        }
    }
    return 0;
}

/* Make the nth next call of `name` fail with `code` (for NULL-returning creators: return NULL). */
EXPORT void fake_fail(const char *name, int nth, int code) {
    for (int i = 0; i < MAX_RULES; i++) {
        if (g_rules[i].countdown <= 0) {
            snprintf(g_rules[i].name, sizeof g_rules[i].name, "%s", name);
            g_rules[i].countdown = nth;
            g_rules[i].code = code;
            return;
        }
    }
}

EXPORT const char *fake_log(void) { return g_log ? g_log : ""; }
EXPORT void fake_clear_log(void) { g_log_len = 0; if (g_log) g_log[0] = 0; }

EXPORT void fake_reset(void) {
    fake_clear_log();
    memset(g_rules, 0, sizeof g_rules);
    g_error[0] = 0;
    g_initialized = 0;
    g_current_device = -1;
    memset(g_device_refs, 0, sizeof g_device_refs);
    g_workspace_size = 256;
    g_device_count = 2;
    snprintf(g_soc, sizeof g_soc, "%s", "Ascend910B3");
    snprintf(g_version, sizeof g_version, "%s", "8.0.RC2");
}

EXPORT void fake_set_device_count(uint32_t n) { g_device_count = n; }
EXPORT void fake_set_soc_name(const char *s) { snprintf(g_soc, sizeof g_soc, "%s", s); }
EXPORT void fake_set_version(const char *s) { snprintf(g_version, sizeof g_version, "%s", s); }
EXPORT void fake_set_workspace_size(uint64_t n) { g_workspace_size = n; }
EXPORT uint64_t fake_get_workspace_size(void) { return g_workspace_size; }
EXPORT int fake_device_refs(int device) { return (device >= 0 && device < 64) ? g_device_refs[device] : -1; }

EXPORT void fake_count(const char *what, int delta) {
    if (strcmp(what, "descriptor") == 0) g_live_descriptors += delta;
    else if (strcmp(what, "executor") == 0) g_live_executors += delta;
}

EXPORT int fake_live_descriptors(void) { return g_live_descriptors; }
EXPORT int fake_live_executors(void) { return g_live_executors; }
EXPORT int fake_live_allocations(void) {
    int n = 0;
    for (int i = 0; i < MAX_ALLOCS; i++) n += g_allocs[i].ptr != NULL;
    return n;
}
EXPORT int fake_live_streams(void) {
    int n = 0;
    for (int i = 0; i < MAX_STREAMS; i++) n += g_streams[i] != NULL;
    return n;
}
EXPORT size_t fake_sizeof_package_version(void);

EXPORT int fake_is_device_range(const void *ptr, size_t size) {
    const char *p = ptr;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (g_allocs[i].ptr && p >= g_allocs[i].ptr && p + size <= g_allocs[i].ptr + g_allocs[i].size)
            return 1;
    }
    return 0;
}

static aclError fail_or(const char *name, aclError ok) {
    int code = fake_should_fail(name);
    return code ? code : ok;
}

EXPORT const char *aclGetRecentErrMsg(void) {
    fake_record("aclGetRecentErrMsg()");
    return g_error[0] ? g_error : NULL;
}

EXPORT aclError aclInit(const char *configPath) {
    aclError rc = fail_or("aclInit", 0);
    if (!rc && g_initialized) {
        fake_set_error("fake: aclInit called twice");
        rc = ACL_ERROR_REPEAT_INITIALIZE;
    }
    if (!rc) g_initialized = 1;
    fake_record("aclInit(configPath=%s) -> %d", configPath ? configPath : "NULL", rc);
    return rc;
}

EXPORT aclError aclFinalize(void) {
    aclError rc = fail_or("aclFinalize", 0);
    if (!rc && !g_initialized) rc = ACL_ERROR_REPEAT_FINALIZE;
    if (!rc) g_initialized = 0;
    fake_record("aclFinalize() -> %d", rc);
    return rc;
}

EXPORT aclError aclrtGetDeviceCount(uint32_t *count) {
    aclError rc = fail_or("aclrtGetDeviceCount", 0);
    if (!rc && !count) rc = ACL_ERROR_INVALID_PARAM;
    if (!rc) *count = g_device_count;
    fake_record("aclrtGetDeviceCount(count=%s) -> %d", count ? "ptr" : "NULL", rc);
    return rc;
}

EXPORT aclError aclrtSetDevice(int32_t deviceId) {
    aclError rc = fail_or("aclrtSetDevice", 0);
    if (!rc && (deviceId < 0 || (uint32_t)deviceId >= g_device_count)) {
        fake_set_error("fake: no device %d (have %u)", deviceId, g_device_count);
        rc = ACL_ERROR_RT_INVALID_DEVICEID;
    }
    if (!rc) { g_current_device = deviceId; g_device_refs[deviceId]++; }
    fake_record("aclrtSetDevice(deviceId=%d) -> %d", deviceId, rc);
    return rc;
}

EXPORT aclError aclrtResetDevice(int32_t deviceId) {
    aclError rc = fail_or("aclrtResetDevice", 0);
    if (!rc && (deviceId < 0 || deviceId >= 64 || g_device_refs[deviceId] <= 0))
        rc = ACL_ERROR_RT_INVALID_DEVICEID;
    if (!rc && --g_device_refs[deviceId] == 0 && g_current_device == deviceId) g_current_device = -1;
    fake_record("aclrtResetDevice(deviceId=%d) -> %d", deviceId, rc);
    return rc;
}

EXPORT const char *aclrtGetSocName(void) {
    int fail = fake_should_fail("aclrtGetSocName");
    const char *out = (fail || !g_soc[0]) ? NULL : g_soc;
    fake_record("aclrtGetSocName() -> %s", out ? out : "NULL");
    return out;
}

EXPORT aclError aclrtGetMemInfo(int attr, size_t *free_bytes, size_t *total) {
    aclError rc = fail_or("aclrtGetMemInfo", 0);
    if (!rc && g_current_device < 0) {
        fake_set_error("fake: aclrtGetMemInfo without a current device");
        rc = ACL_ERROR_RT_CONTEXT_NULL;
    }
    if (!rc && (!free_bytes || !total)) rc = ACL_ERROR_INVALID_PARAM;
    if (!rc) { *total = g_total_memory; *free_bytes = g_total_memory - g_alloc_bytes; }
    fake_record("aclrtGetMemInfo(attr=%d) -> %d", attr, rc);
    return rc;
}

EXPORT aclError aclrtMalloc(void **devPtr, size_t size, int policy) {
    aclError rc = fail_or("aclrtMalloc", 0);
    void *p = NULL;
    if (!rc && (!devPtr || size == 0)) rc = ACL_ERROR_INVALID_PARAM;
    if (!rc) {
        /* ACL rounds up to 32 bytes and adds 32 on 910-class parts; the tests read that padding */
        size_t padded = (size + 31) / 32 * 32 + 32;
        if (posix_memalign(&p, 64, padded) != 0) rc = 207001;
        int slot = -1;
        for (int i = 0; !rc && i < MAX_ALLOCS; i++) if (!g_allocs[i].ptr) { slot = i; break; }
        if (!rc && slot < 0) { free(p); p = NULL; rc = 207001; }
        if (!rc) {
            memset(p, 0xA5, padded); /* poison: unwritten device bytes are not zero */
            g_allocs[slot].ptr = p;
            g_allocs[slot].size = padded;
            g_alloc_bytes += padded;
            *devPtr = p;
        }
    }
    fake_record("aclrtMalloc(size=%zu, policy=%d) -> %d ptr=%p", size, policy, rc, p);
    return rc;
}

EXPORT aclError aclrtFree(void *devPtr) {
    aclError rc = fail_or("aclrtFree", 0);
    int found = 0;
    for (int i = 0; !rc && i < MAX_ALLOCS; i++) {
        if (g_allocs[i].ptr && g_allocs[i].ptr == devPtr) {
            g_alloc_bytes -= g_allocs[i].size;
            free(g_allocs[i].ptr);
            g_allocs[i].ptr = NULL;
            found = 1;
            break;
        }
    }
    if (!rc && !found) { fake_set_error("fake: aclrtFree of unknown pointer %p", devPtr); rc = ACL_ERROR_RT_MEMORY_FREE; }
    fake_record("aclrtFree(devPtr=%p) -> %d", devPtr, rc);
    return rc;
}

EXPORT aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, int kind) {
    aclError rc = fail_or("aclrtMemcpy", 0);
    if (!rc && (count > destMax || !dst || !src)) {
        fake_set_error("fake: aclrtMemcpy count %zu > destMax %zu", count, destMax);
        rc = ACL_ERROR_INVALID_PARAM;
    }
    if (!rc) {
        int dst_dev = fake_is_device_range(dst, destMax), src_dev = fake_is_device_range(src, count);
        int want_dst = kind == 1 || kind == 3, want_src = kind == 2 || kind == 3;
        if (kind < 0 || kind > 3 || dst_dev != want_dst || src_dev != want_src) {
            fake_set_error("fake: aclrtMemcpy kind %d does not match dst %s / src %s", kind,
                           dst_dev ? "device" : "host", src_dev ? "device" : "host");
            rc = ACL_ERROR_RT_PARAM_INVALID;
        }
    }
    if (!rc) memmove(dst, src, count);
    fake_record("aclrtMemcpy(dst=%p, destMax=%zu, src=%p, count=%zu, kind=%d) -> %d", dst, destMax, src,
                count, kind, rc);
    return rc;
}

EXPORT aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count) {
    aclError rc = fail_or("aclrtMemset", 0);
    if (!rc && (count > maxCount || !fake_is_device_range(devPtr, maxCount))) rc = ACL_ERROR_INVALID_PARAM;
    if (!rc) memset(devPtr, value, count);
    fake_record("aclrtMemset(devPtr=%p, maxCount=%zu, value=%d, count=%zu) -> %d", devPtr, maxCount, value,
                count, rc);
    return rc;
}

static int stream_slot(void *s) {
    for (int i = 0; i < MAX_STREAMS; i++) if (s && g_streams[i] == s) return i;
    return -1;
}

EXPORT aclError aclrtCreateStream(aclrtStream *stream) {
    aclError rc = fail_or("aclrtCreateStream", 0);
    void *s = NULL;
    if (!rc && !stream) rc = ACL_ERROR_INVALID_PARAM;
    for (int i = 0; !rc && i < MAX_STREAMS; i++) {
        if (!g_streams[i]) { s = malloc(16); g_streams[i] = s; *stream = s; break; }
    }
    fake_record("aclrtCreateStream() -> %d stream=%p", rc, s);
    return rc;
}

EXPORT aclError aclrtDestroyStream(aclrtStream stream) {
    aclError rc = fail_or("aclrtDestroyStream", 0);
    int slot = stream_slot(stream);
    if (!rc && slot < 0) rc = ACL_ERROR_RT_INVALID_HANDLE;
    if (!rc) { free(g_streams[slot]); g_streams[slot] = NULL; }
    fake_record("aclrtDestroyStream(stream=%p) -> %d", stream, rc);
    return rc;
}

EXPORT aclError aclrtSynchronizeStream(aclrtStream stream) {
    aclError rc = fail_or("aclrtSynchronizeStream", 0);
    if (!rc && stream_slot(stream) < 0) rc = ACL_ERROR_RT_INVALID_HANDLE;
    fake_record("aclrtSynchronizeStream(stream=%p) -> %d", stream, rc);
    return rc;
}

typedef struct {
    char version[128];
    char majorVersion[64];
    char minorVersion[64];
    char releaseVersion[64];
    char patchVersion[64];
    char reserved[128];
} FakePackageVersion;

EXPORT size_t fake_sizeof_package_version(void) { return sizeof(FakePackageVersion); }

EXPORT aclError aclsysGetCANNVersion(int name, FakePackageVersion *version) {
    aclError rc = fail_or("aclsysGetCANNVersion", 0);
    if (!rc && !version) rc = ACL_ERROR_INVALID_PARAM;
    if (!rc) {
        memset(version, 0, sizeof *version);
        snprintf(version->version, sizeof version->version, "%s", g_version);
        snprintf(version->majorVersion, sizeof version->majorVersion, "major-of-%.50s", g_version);
        snprintf(version->reserved, sizeof version->reserved, "reserved");
    }
    fake_record("aclsysGetCANNVersion(name=%d) -> %d", name, rc);
    return rc;
}

#ifndef FAKE_NO_VERSION_STR
EXPORT aclError aclsysGetVersionStr(char *pkgName, char *versionStr) {
    aclError rc = fail_or("aclsysGetVersionStr", 0);
    if (!rc && (!pkgName || !versionStr)) rc = ACL_ERROR_INVALID_PARAM;
    if (!rc) snprintf(versionStr, 128, "%s", g_version);
    fake_record("aclsysGetVersionStr(pkgName=%s) -> %d", pkgName ? pkgName : "NULL", rc);
    return rc;
}
#endif
#endif /* FAKE_PART_RUNTIME */

#ifdef FAKE_PART_NNOPBASE
/* ===================================== nnopbase part ==================================== */
static void format_dims(char *out, size_t cap, const int64_t *v, uint64_t n) {
    size_t used = (size_t)snprintf(out, cap, "[");
    for (uint64_t i = 0; v && i < n && used < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, i ? ",%lld" : "%lld", (long long)v[i]);
    if (used < cap) snprintf(out + used, cap - used, "]");
}

EXPORT void *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, int dataType,
                             const int64_t *stride, int64_t offset, int format,
                             const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData) {
    char dims[256], strides[256], storage[256];
    format_dims(dims, sizeof dims, viewDims, viewDimsNum);
    format_dims(strides, sizeof strides, stride, viewDimsNum);
    format_dims(storage, sizeof storage, storageDims, storageDimsNum);
    FakeTensor *t = NULL;
    int bad = fake_should_fail("aclCreateTensor");
    if (!bad && (viewDimsNum > MAX_DIMS || storageDimsNum > MAX_DIMS || storageDimsNum == 0 || !tensorData)) {
        fake_set_error("fake: aclCreateTensor bad rank or NULL data");
        bad = 1;
    }
    if (!bad && ((uintptr_t)tensorData % 32) != 0) {
        fake_set_error("fake: aclCreateTensor data %p not 32-byte aligned", tensorData);
        bad = 1;
    }
    if (!bad) {
        /* the furthest element the view reaches must lie inside the storage */
        int64_t last = offset, capacity = 1;
        for (uint64_t i = 0; i < viewDimsNum; i++) last += (viewDims[i] - 1) * stride[i];
        for (uint64_t i = 0; i < storageDimsNum; i++) capacity *= storageDims[i];
        if (last >= capacity || offset < 0) {
            fake_set_error("fake: aclCreateTensor view reaches element %lld of storage %lld", (long long)last,
                           (long long)capacity);
            bad = 1;
        }
    }
    if (!bad) {
        t = calloc(1, sizeof *t);
        t->magic = TENSOR_MAGIC;
        t->ndim = viewDimsNum;
        memcpy(t->dims, viewDims, viewDimsNum * sizeof(int64_t));
        memcpy(t->strides, stride, viewDimsNum * sizeof(int64_t));
        t->offset = offset;
        t->dtype = dataType;
        t->format = format;
        t->storage_ndim = storageDimsNum;
        memcpy(t->storage, storageDims, storageDimsNum * sizeof(int64_t));
        t->data = tensorData;
        fake_count("descriptor", 1);
    }
    fake_record("aclCreateTensor(viewDims=%s, dataType=%d, stride=%s, offset=%lld, format=%d, storageDims=%s, "
                "tensorData=%p) -> %p", dims, dataType, strides, (long long)offset, format, storage, tensorData,
                (void *)t);
    return t;
}

static aclnnStatus destroy_checked(const char *name, void *handle, uint32_t magic) {
    aclnnStatus rc = fake_should_fail(name);
    if (!rc && !handle) rc = ACLNN_ERR_PARAM_NULLPTR;
    if (!rc && *(uint32_t *)handle != magic) {
        fake_set_error("fake: %s of a handle that is not a live descriptor of that kind", name);
        rc = ACLNN_ERR_PARAM_INVALID;
    }
    if (!rc) { *(uint32_t *)handle = DEAD_MAGIC; free(handle); fake_count("descriptor", -1); }
    fake_record("%s(%p) -> %d", name, handle, rc);
    return rc;
}

EXPORT aclnnStatus aclDestroyTensor(const void *tensor) {
    return destroy_checked("aclDestroyTensor", (void *)tensor, TENSOR_MAGIC);
}

EXPORT void *aclCreateScalar(void *value, int dataType) {
    FakeScalar *s = NULL;
    char text[64] = "?";
    if (!fake_should_fail("aclCreateScalar") && value) {
        double v;
        switch (dataType) {
            case ACL_FLOAT: v = *(float *)value; break;
            case ACL_INT32: v = *(int32_t *)value; break;
            case ACL_INT64: v = (double)*(int64_t *)value; break;
            case ACL_BOOL: v = *(bool *)value; break;
            default: v = NAN; break;
        }
        if (!isnan(v)) {
            s = calloc(1, sizeof *s);
            s->magic = SCALAR_MAGIC;
            s->dtype = dataType;
            s->value = v;
            fake_count("descriptor", 1);
            snprintf(text, sizeof text, "%.9g", v);
        }
    }
    fake_record("aclCreateScalar(value=%s, dataType=%d) -> %p", text, dataType, (void *)s);
    return s;
}

EXPORT aclnnStatus aclDestroyScalar(const void *scalar) {
    return destroy_checked("aclDestroyScalar", (void *)scalar, SCALAR_MAGIC);
}

EXPORT void *aclCreateIntArray(const int64_t *value, uint64_t size) {
    char text[256];
    format_dims(text, sizeof text, value, size);
    FakeIntArray *a = NULL;
    if (!fake_should_fail("aclCreateIntArray")) {
        a = calloc(1, sizeof *a + size * sizeof(int64_t));
        a->magic = INTARRAY_MAGIC;
        a->size = size;
        if (size) memcpy(a->values, value, size * sizeof(int64_t));
        fake_count("descriptor", 1);
    }
    fake_record("aclCreateIntArray(value=%s, size=%llu) -> %p", text, (unsigned long long)size, (void *)a);
    return a;
}

EXPORT aclnnStatus aclDestroyIntArray(const void *array) {
    return destroy_checked("aclDestroyIntArray", (void *)array, INTARRAY_MAGIC);
}

EXPORT void *aclCreateFloatArray(const float *value, uint64_t size) {
    char text[512];
    size_t used = (size_t)snprintf(text, sizeof text, "[");
    for (uint64_t i = 0; i < size && used < sizeof text; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, i ? ",%.9g" : "%.9g", (double)value[i]);
    if (used < sizeof text) snprintf(text + used, sizeof text - used, "]");
    uint32_t *a = NULL;
    if (!fake_should_fail("aclCreateFloatArray")) {
        a = calloc(1, 16 + size * sizeof(float));
        *a = FLOATARRAY_MAGIC;
        fake_count("descriptor", 1);
    }
    fake_record("aclCreateFloatArray(value=%s, size=%llu) -> %p", text, (unsigned long long)size, (void *)a);
    return a;
}

EXPORT aclnnStatus aclDestroyFloatArray(const void *array) {
    return destroy_checked("aclDestroyFloatArray", (void *)array, FLOATARRAY_MAGIC);
}

EXPORT void *aclCreateBoolArray(const bool *value, uint64_t size) {
    /* reads the array as one byte per bool: a wider element type shows up as interleaved zeros */
    char text[256];
    size_t used = (size_t)snprintf(text, sizeof text, "[");
    for (uint64_t i = 0; i < size && used < sizeof text; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, i ? ",%d" : "%d",
                                 (int)((const unsigned char *)value)[i]);
    if (used < sizeof text) snprintf(text + used, sizeof text - used, "]");
    uint32_t *a = NULL;
    if (!fake_should_fail("aclCreateBoolArray")) {
        a = calloc(1, 16 + size);
        *a = BOOLARRAY_MAGIC;
        fake_count("descriptor", 1);
    }
    fake_record("aclCreateBoolArray(value=%s, size=%llu) -> %p", text, (unsigned long long)size, (void *)a);
    return a;
}

EXPORT aclnnStatus aclDestroyBoolArray(const void *array) {
    return destroy_checked("aclDestroyBoolArray", (void *)array, BOOLARRAY_MAGIC);
}
#endif /* FAKE_PART_NNOPBASE */

#ifdef FAKE_PART_OPAPI
/* ====================================== opapi part ====================================== */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) bits = sign;
        else {
            int e = -1;
            do { e++; mant <<= 1; } while (!(mant & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 0x1f) bits = sign | 0x7f800000u | (mant << 13);
    else bits = sign | ((exp + 112) << 23) | (mant << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t float_to_half(float f) { /* round to nearest, ties to even */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, mant = x & 0x7fffff;
    int exp = (int)((x >> 23) & 0xff);
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    int e = exp - 127 + 15;
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        mant |= 0x800000;
        int shift = 14 - e;
        uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
    return (uint16_t)(sign | half);
}

static int64_t element_index(const FakeTensor *t, const int64_t *idx) {
    int64_t at = t->offset;
    for (uint64_t i = 0; i < t->ndim; i++) at += idx[i] * t->strides[i];
    return at;
}

static double load(const FakeTensor *t, int64_t at) {
    switch (t->dtype) {
        case ACL_FLOAT: return ((float *)t->data)[at];
        case ACL_FLOAT16: return half_to_float(((uint16_t *)t->data)[at]);
        case ACL_BF16: {
            uint32_t bits = (uint32_t)((uint16_t *)t->data)[at] << 16;
            float f;
            memcpy(&f, &bits, 4);
            return f;
        }
        case ACL_INT32: return ((int32_t *)t->data)[at];
        default: return NAN;
    }
}

static void store(const FakeTensor *t, int64_t at, double v) {
    switch (t->dtype) {
        case ACL_FLOAT: ((float *)t->data)[at] = (float)v; break;
        case ACL_FLOAT16: ((uint16_t *)t->data)[at] = float_to_half((float)v); break;
        case ACL_BF16: {
            float f = (float)v;
            uint32_t x;
            memcpy(&x, &f, 4);
            x += 0x7fff + ((x >> 16) & 1);
            ((uint16_t *)t->data)[at] = (uint16_t)(x >> 16);
            break;
        }
        case ACL_INT32: ((int32_t *)t->data)[at] = (int32_t)v; break;
        default: break;
    }
}

static int64_t numel(const FakeTensor *t) {
    int64_t n = 1;
    for (uint64_t i = 0; i < t->ndim; i++) n *= t->dims[i];
    return n;
}

/* Advance a row-major multi-index over dims; returns 0 after the last element. */
static int next_index(int64_t *idx, const int64_t *dims, uint64_t n) {
    for (int64_t i = (int64_t)n - 1; i >= 0; i--) {
        if (++idx[i] < dims[i]) return 1;
        idx[i] = 0;
    }
    return 0;
}

/* numpy-style broadcast of `in` to the out index (aligned on the right) */
static int64_t broadcast_index(const FakeTensor *in, const FakeTensor *out, const int64_t *out_idx) {
    int64_t idx[MAX_DIMS] = {0};
    uint64_t lead = out->ndim - in->ndim;
    for (uint64_t i = 0; i < in->ndim; i++) idx[i] = in->dims[i] == 1 ? 0 : out_idx[lead + i];
    return element_index(in, idx);
}

static int broadcastable(const FakeTensor *in, const FakeTensor *out) {
    if (in->ndim > out->ndim) return 0;
    uint64_t lead = out->ndim - in->ndim;
    for (uint64_t i = 0; i < in->ndim; i++)
        if (in->dims[i] != 1 && in->dims[i] != out->dims[lead + i]) return 0;
    return 1;
}

enum OpKind { OP_ADD, OP_MUL, OP_DIV, OP_SILU, OP_GELU, OP_SOFTMAX, OP_MATMUL, OP_CAST, OP_LAYERNORM,
              OP_RMSNORM };

typedef struct {
    uint32_t magic;
    enum OpKind kind;
    const FakeTensor *a, *b, *c, *out, *extra;
    double alpha, eps;
    int64_t dim;
} FakeExecutor;

static const char *tensor_text(const void *t, char *buf, size_t cap) {
    const FakeTensor *ft = t;
    if (!ft) { snprintf(buf, cap, "NULL"); return buf; }
    if (ft->magic != TENSOR_MAGIC) { snprintf(buf, cap, "INVALID"); return buf; }
    size_t used = (size_t)snprintf(buf, cap, "T(dtype=%d,dims=[", ft->dtype);
    for (uint64_t i = 0; i < ft->ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, i ? ",%lld" : "%lld", (long long)ft->dims[i]);
    if (used < cap) snprintf(buf + used, cap - used, "])");
    return buf;
}

static int valid_tensor(const void *t) { return t && ((const FakeTensor *)t)->magic == TENSOR_MAGIC; }

/* Shared first-phase epilogue: validation result, workspace size, executor. */
static aclnnStatus finish_first_phase(const char *name, aclnnStatus rc, FakeExecutor *proto,
                                      uint64_t *workspaceSize, void **executor) {
    if (!rc) rc = fake_should_fail(name);
    if (!rc && (!workspaceSize || !executor)) rc = ACLNN_ERR_PARAM_NULLPTR;
    if (!rc) {
        FakeExecutor *e = malloc(sizeof *e);
        *e = *proto;
        e->magic = EXECUTOR_MAGIC;
        *executor = e;
        *workspaceSize = fake_get_workspace_size();
        fake_count("executor", 1);
    }
    return rc;
}

#define WS_ARGS uint64_t *workspaceSize, void **executor
#define T(x) tensor_text((x), b_##x, sizeof b_##x)

static aclnnStatus binary_first(const char *name, enum OpKind kind, const void *self, const void *other,
                                double alpha, void *out, WS_ARGS) {
    aclnnStatus rc = 0;
    if (!valid_tensor(self) || !valid_tensor(other) || !valid_tensor(out)) rc = ACLNN_ERR_PARAM_NULLPTR;
    else if (!broadcastable(self, out) || !broadcastable(other, out)) {
        fake_set_error("fake: %s inputs do not broadcast to the output shape", name);
        rc = ACLNN_ERR_PARAM_INVALID;
    }
    FakeExecutor e = {.kind = kind, .a = self, .b = other, .out = out, .alpha = alpha};
    return finish_first_phase(name, rc, &e, workspaceSize, executor);
}

EXPORT aclnnStatus aclnnAddGetWorkspaceSize(const void *self, const void *other, const void *alpha, void *out,
                                            WS_ARGS) {
    char b_self[128], b_other[128], b_out[128];
    const FakeScalar *s = alpha;
    aclnnStatus rc = (!s || s->magic != SCALAR_MAGIC) ? ACLNN_ERR_PARAM_NULLPTR : 0;
    if (!rc) rc = binary_first("aclnnAddGetWorkspaceSize", OP_ADD, self, other, s->value, out, workspaceSize,
                               executor);
    fake_record("aclnnAddGetWorkspaceSize(self=%s, other=%s, alpha=%.9g, out=%s) -> %d", T(self), T(other),
                s && s->magic == SCALAR_MAGIC ? s->value : NAN, T(out), rc);
    return rc;
}

EXPORT aclnnStatus aclnnMulGetWorkspaceSize(const void *self, const void *other, void *out, WS_ARGS) {
    char b_self[128], b_other[128], b_out[128];
    aclnnStatus rc = binary_first("aclnnMulGetWorkspaceSize", OP_MUL, self, other, 1, out, workspaceSize, executor);
    fake_record("aclnnMulGetWorkspaceSize(self=%s, other=%s, out=%s) -> %d", T(self), T(other), T(out), rc);
    return rc;
}

EXPORT aclnnStatus aclnnDivGetWorkspaceSize(const void *self, const void *other, void *out, WS_ARGS) {
    char b_self[128], b_other[128], b_out[128];
    aclnnStatus rc = binary_first("aclnnDivGetWorkspaceSize", OP_DIV, self, other, 1, out, workspaceSize, executor);
    fake_record("aclnnDivGetWorkspaceSize(self=%s, other=%s, out=%s) -> %d", T(self), T(other), T(out), rc);
    return rc;
}

static aclnnStatus unary_first(const char *name, enum OpKind kind, const void *self, void *out, int64_t dim,
                               WS_ARGS) {
    aclnnStatus rc = 0;
    if (!valid_tensor(self) || !valid_tensor(out)) rc = ACLNN_ERR_PARAM_NULLPTR;
    else if (((const FakeTensor *)self)->ndim != ((const FakeTensor *)out)->ndim ||
             memcmp(((const FakeTensor *)self)->dims, ((const FakeTensor *)out)->dims,
                    ((const FakeTensor *)out)->ndim * sizeof(int64_t)) != 0) {
        fake_set_error("fake: %s output shape differs from input", name);
        rc = ACLNN_ERR_PARAM_INVALID;
    }
    FakeExecutor e = {.kind = kind, .a = self, .out = out, .dim = dim};
    return finish_first_phase(name, rc, &e, workspaceSize, executor);
}

EXPORT aclnnStatus aclnnSiluGetWorkspaceSize(const void *self, void *out, WS_ARGS) {
    char b_self[128], b_out[128];
    aclnnStatus rc = unary_first("aclnnSiluGetWorkspaceSize", OP_SILU, self, out, 0, workspaceSize, executor);
    fake_record("aclnnSiluGetWorkspaceSize(self=%s, out=%s) -> %d", T(self), T(out), rc);
    return rc;
}

EXPORT aclnnStatus aclnnGeluGetWorkspaceSize(const void *self, void *out, WS_ARGS) {
    char b_self[128], b_out[128];
    aclnnStatus rc = unary_first("aclnnGeluGetWorkspaceSize", OP_GELU, self, out, 0, workspaceSize, executor);
    fake_record("aclnnGeluGetWorkspaceSize(self=%s, out=%s) -> %d", T(self), T(out), rc);
    return rc;
}

EXPORT aclnnStatus aclnnSoftmaxGetWorkspaceSize(const void *self, int64_t dim, void *out, WS_ARGS) {
    char b_self[128], b_out[128];
    aclnnStatus rc = 0;
    if (valid_tensor(self)) {
        int64_t nd = (int64_t)((const FakeTensor *)self)->ndim;
        if (dim < -nd || dim >= nd) { fake_set_error("fake: softmax dim %lld out of range", (long long)dim); rc = ACLNN_ERR_PARAM_INVALID; }
        else if (dim < 0) dim += nd;
    }
    if (!rc) rc = unary_first("aclnnSoftmaxGetWorkspaceSize", OP_SOFTMAX, self, out, dim, workspaceSize, executor);
    fake_record("aclnnSoftmaxGetWorkspaceSize(self=%s, dim=%lld, out=%s) -> %d", T(self), (long long)dim, T(out), rc);
    return rc;
}

EXPORT aclnnStatus aclnnCastGetWorkspaceSize(const void *self, int dtype, void *out, WS_ARGS) {
    char b_self[128], b_out[128];
    aclnnStatus rc = 0;
    if (valid_tensor(out) && ((const FakeTensor *)out)->dtype != dtype) {
        fake_set_error("fake: aclnnCast dtype %d but out has %d", dtype, ((const FakeTensor *)out)->dtype);
        rc = ACLNN_ERR_PARAM_INVALID;
    }
    if (!rc) rc = unary_first("aclnnCastGetWorkspaceSize", OP_CAST, self, out, 0, workspaceSize, executor);
    fake_record("aclnnCastGetWorkspaceSize(self=%s, dtype=%d, out=%s) -> %d", T(self), dtype, T(out), rc);
    return rc;
}

EXPORT aclnnStatus aclnnMatmulGetWorkspaceSize(const void *self, const void *mat2, void *out, int8_t cubeMathType,
                                               WS_ARGS) {
    char b_self[128], b_mat2[128], b_out[128];
    aclnnStatus rc = 0;
    if (!valid_tensor(self) || !valid_tensor(mat2) || !valid_tensor(out)) rc = ACLNN_ERR_PARAM_NULLPTR;
    else {
        const FakeTensor *a = self, *b = mat2, *o = out;
        if (a->ndim < 2 || b->ndim < 2 || o->ndim < 2 || a->dims[a->ndim - 1] != b->dims[b->ndim - 2] ||
            o->dims[o->ndim - 2] != a->dims[a->ndim - 2] || o->dims[o->ndim - 1] != b->dims[b->ndim - 1]) {
            fake_set_error("fake: aclnnMatmul shapes do not chain");
            rc = ACLNN_ERR_PARAM_INVALID;
        } else {
            /* batch dims broadcast numpy-style to the output's */
            FakeTensor ab = *a, bb = *b, ob = *o;
            ab.ndim -= 2; bb.ndim -= 2; ob.ndim -= 2;
            if (!broadcastable(&ab, &ob) || !broadcastable(&bb, &ob)) {
                fake_set_error("fake: aclnnMatmul batch dims do not broadcast");
                rc = ACLNN_ERR_PARAM_INVALID;
            }
        }
    }
    if (!rc && (cubeMathType < 0 || cubeMathType > 3)) rc = ACLNN_ERR_PARAM_INVALID;
    FakeExecutor e = {.kind = OP_MATMUL, .a = self, .b = mat2, .out = out};
    rc = finish_first_phase("aclnnMatmulGetWorkspaceSize", rc, &e, workspaceSize, executor);
    fake_record("aclnnMatmulGetWorkspaceSize(self=%s, mat2=%s, out=%s, cubeMathType=%d) -> %d", T(self), T(mat2),
                T(out), (int)cubeMathType, rc);
    return rc;
}

EXPORT aclnnStatus aclnnLayerNormGetWorkspaceSize(const void *input, const void *normalizedShape,
                                                  const void *weightOptional, const void *biasOptional, double eps,
                                                  void *out, void *meanOutOptional, void *rstdOutOptional,
                                                  WS_ARGS) {
    char b_input[128], b_weightOptional[128], b_biasOptional[128], b_out[128];
    const FakeIntArray *shape = normalizedShape;
    aclnnStatus rc = 0;
    if (!valid_tensor(input) || !valid_tensor(out) || !shape || shape->magic != INTARRAY_MAGIC) rc = ACLNN_ERR_PARAM_NULLPTR;
    else if (shape->size != 1 || shape->values[0] != ((const FakeTensor *)input)->dims[((const FakeTensor *)input)->ndim - 1]) {
        fake_set_error("fake: aclnnLayerNorm supports one normalized (last) dim");
        rc = ACLNN_ERR_PARAM_INVALID;
    }
    FakeExecutor e = {.kind = OP_LAYERNORM, .a = input, .b = weightOptional, .c = biasOptional, .out = out,
                      .eps = eps};
    rc = finish_first_phase("aclnnLayerNormGetWorkspaceSize", rc, &e, workspaceSize, executor);
    fake_record("aclnnLayerNormGetWorkspaceSize(input=%s, normalizedShape=%lld, weight=%s, bias=%s, eps=%.17g, "
                "out=%s, mean=%s, rstd=%s) -> %d", T(input), shape ? (long long)shape->values[0] : -1LL,
                T(weightOptional), T(biasOptional), eps, T(out), meanOutOptional ? "set" : "NULL",
                rstdOutOptional ? "set" : "NULL", rc);
    return rc;
}

EXPORT aclnnStatus aclnnRmsNormGetWorkspaceSize(const void *x, const void *gamma, double epsilon, const void *yOut,
                                                const void *rstdOut, WS_ARGS) {
    char b_x[128], b_gamma[128], b_yOut[128], b_rstdOut[128];
    aclnnStatus rc = 0;
    if (!valid_tensor(x) || !valid_tensor(gamma) || !valid_tensor(yOut)) rc = ACLNN_ERR_PARAM_NULLPTR;
    FakeExecutor e = {.kind = OP_RMSNORM, .a = x, .b = gamma, .out = yOut, .extra = rstdOut, .eps = epsilon};
    rc = finish_first_phase("aclnnRmsNormGetWorkspaceSize", rc, &e, workspaceSize, executor);
    fake_record("aclnnRmsNormGetWorkspaceSize(x=%s, gamma=%s, epsilon=%.17g, yOut=%s, rstdOut=%s) -> %d", T(x),
                T(gamma), epsilon, T(yOut), T(rstdOut), rc);
    return rc;
}

static void run_elementwise(const FakeExecutor *e) {
    const FakeTensor *o = e->out;
    int64_t idx[MAX_DIMS] = {0};
    if (numel(o) == 0) return;
    do {
        double a = load(e->a, e->kind <= OP_DIV ? broadcast_index(e->a, o, idx) : element_index(e->a, idx)), r;
        switch (e->kind) {
            case OP_ADD: r = a + e->alpha * load(e->b, broadcast_index(e->b, o, idx)); break;
            case OP_MUL: r = a * load(e->b, broadcast_index(e->b, o, idx)); break;
            case OP_DIV: r = a / load(e->b, broadcast_index(e->b, o, idx)); break;
            case OP_SILU: r = a / (1.0 + exp(-a)); break;
            case OP_GELU: r = 0.5 * a * (1.0 + erf(a / sqrt(2.0))); break;
            default: r = a; break; /* cast */
        }
        store(o, element_index(o, idx), r);
    } while (next_index(idx, o->dims, o->ndim));
}

/* Reduce along one dim: visit every "row" (all other indices), hand the row to fn. */
static void run_rows(const FakeExecutor *e, int64_t dim) {
    const FakeTensor *in = e->a, *o = e->out;
    int64_t outer_dims[MAX_DIMS], idx[MAX_DIMS] = {0};
    memcpy(outer_dims, in->dims, sizeof outer_dims);
    int64_t n = in->dims[dim];
    outer_dims[dim] = 1;
    double *row = malloc(sizeof(double) * (size_t)(n ? n : 1));
    do {
        for (int64_t k = 0; k < n; k++) { idx[dim] = k; row[k] = load(in, element_index(in, idx)); }
        double r0 = 0, r1 = 0;
        if (e->kind == OP_SOFTMAX) {
            double m = -INFINITY;
            for (int64_t k = 0; k < n; k++) m = row[k] > m ? row[k] : m;
            for (int64_t k = 0; k < n; k++) { row[k] = exp(row[k] - m); r0 += row[k]; }
            for (int64_t k = 0; k < n; k++) row[k] /= r0;
        } else if (e->kind == OP_LAYERNORM) {
            for (int64_t k = 0; k < n; k++) r0 += row[k];
            r0 /= (double)n;
            for (int64_t k = 0; k < n; k++) r1 += (row[k] - r0) * (row[k] - r0);
            r1 = 1.0 / sqrt(r1 / (double)n + e->eps);
            for (int64_t k = 0; k < n; k++) {
                int64_t at = k;
                row[k] = (row[k] - r0) * r1;
                if (e->b) row[k] *= load(e->b, at * e->b->strides[e->b->ndim - 1] + e->b->offset);
                if (e->c) row[k] += load(e->c, at * e->c->strides[e->c->ndim - 1] + e->c->offset);
            }
        } else { /* RMS_NORM */
            for (int64_t k = 0; k < n; k++) r0 += row[k] * row[k];
            r1 = 1.0 / sqrt(r0 / (double)n + e->eps);
            for (int64_t k = 0; k < n; k++)
                row[k] = row[k] * r1 * load(e->b, k * e->b->strides[e->b->ndim - 1] + e->b->offset);
        }
        for (int64_t k = 0; k < n; k++) { idx[dim] = k; store(o, element_index(o, idx), row[k]); }
        idx[dim] = 0;
    } while (next_index(idx, outer_dims, in->ndim));
    free(row);
}

static void run_matmul(const FakeExecutor *e) {
    const FakeTensor *a = e->a, *b = e->b, *o = e->out;
    int64_t idx[MAX_DIMS] = {0};
    int64_t K = a->dims[a->ndim - 1];
    if (numel(o) == 0) return;
    do {
        /* idx over out = [batch..., m, n] */
        int64_t ai[MAX_DIMS] = {0}, bi[MAX_DIMS] = {0};
        uint64_t ob = o->ndim - 2;
        for (uint64_t i = 0; i < a->ndim - 2; i++) {
            uint64_t oi = ob - (a->ndim - 2) + i;
            ai[i] = a->dims[i] == 1 ? 0 : idx[oi];
        }
        for (uint64_t i = 0; i < b->ndim - 2; i++) {
            uint64_t oi = ob - (b->ndim - 2) + i;
            bi[i] = b->dims[i] == 1 ? 0 : idx[oi];
        }
        ai[a->ndim - 2] = idx[o->ndim - 2];
        bi[b->ndim - 1] = idx[o->ndim - 1];
        double acc = 0;
        for (int64_t k = 0; k < K; k++) {
            ai[a->ndim - 1] = k;
            bi[b->ndim - 2] = k;
            acc += load(a, element_index(a, ai)) * load(b, element_index(b, bi));
        }
        store(o, element_index(o, idx), acc);
    } while (next_index(idx, o->dims, o->ndim));
}

static aclnnStatus second_phase(const char *name, enum OpKind kind, void *workspace, uint64_t workspaceSize,
                                void *executor, aclrtStream stream) {
    FakeExecutor *e = executor;
    aclnnStatus rc = fake_should_fail(name);
    if (!rc && (!e || e->magic != EXECUTOR_MAGIC || e->kind != kind)) {
        fake_set_error("fake: %s with an executor it did not create", name);
        rc = ACLNN_ERR_PARAM_INVALID;
    }
    if (!rc && workspaceSize > 0 && !fake_is_device_range(workspace, workspaceSize)) {
        fake_set_error("fake: %s workspace %p is not %llu bytes of device memory", name, workspace,
                       (unsigned long long)workspaceSize);
        rc = ACLNN_ERR_PARAM_INVALID;
    }
    if (!rc && !stream) rc = ACLNN_ERR_PARAM_NULLPTR;
    if (!rc) {
        switch (kind) {
            case OP_SOFTMAX: run_rows(e, e->dim); break;
            case OP_LAYERNORM:
            case OP_RMSNORM: run_rows(e, (int64_t)e->a->ndim - 1); break;
            case OP_MATMUL: run_matmul(e); break;
            default: run_elementwise(e); break;
        }
    }
    /* a non-repeatable executor is consumed by the second phase, whatever its outcome */
    if (e && e->magic == EXECUTOR_MAGIC) { e->magic = DEAD_MAGIC; free(e); fake_count("executor", -1); }
    fake_record("%s(workspace=%p, workspaceSize=%llu, executor=%p, stream=%p) -> %d", name, workspace,
                (unsigned long long)workspaceSize, executor, stream, rc);
    return rc;
}

#define SECOND_PHASE(fn, kind)                                                                      \
    EXPORT aclnnStatus fn(void *workspace, uint64_t workspaceSize, void *executor, aclrtStream stream) { \
        return second_phase(#fn, kind, workspace, workspaceSize, executor, stream);                  \
    }
SECOND_PHASE(aclnnAdd, OP_ADD)
SECOND_PHASE(aclnnMul, OP_MUL)
SECOND_PHASE(aclnnDiv, OP_DIV)
SECOND_PHASE(aclnnSilu, OP_SILU)
SECOND_PHASE(aclnnGelu, OP_GELU)
SECOND_PHASE(aclnnSoftmax, OP_SOFTMAX)
SECOND_PHASE(aclnnMatmul, OP_MATMUL)
SECOND_PHASE(aclnnCast, OP_CAST)
SECOND_PHASE(aclnnLayerNorm, OP_LAYERNORM)
SECOND_PHASE(aclnnRmsNorm, OP_RMSNORM)
#endif /* FAKE_PART_OPAPI */
