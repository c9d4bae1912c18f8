"""The C prototypes this package binds, written as the public headers declare them.

Each prototype is kept as C text (the same text acl-facts.md quotes from the headers) and turned
into ctypes ``argtypes``/``restype`` by :func:`ctypes_signature`. Keeping the C text as the single
source means a test can compare every binding with the documented prototype, and a wrong width
(``float`` for a ``double eps``, ``int`` for an ``int8_t cubeMathType``) shows up as a text diff
instead of silent register garbage on the device.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass


class AclCANNPackageVersion(ctypes.Structure):
    """``aclCANNPackageVersion`` (acl_rt.h): six fixed char arrays, 512 bytes."""

    _fields_ = [
        ("version", ctypes.c_char * 128),
        ("majorVersion", ctypes.c_char * 64),
        ("minorVersion", ctypes.c_char * 64),
        ("releaseVersion", ctypes.c_char * 64),
        ("patchVersion", ctypes.c_char * 64),
        ("reserved", ctypes.c_char * 128),
    ]


# libascendcl.so
RUNTIME_PROTOTYPES: tuple[str, ...] = (
    "aclError aclInit(const char *configPath)",
    "aclError aclFinalize()",
    "aclError aclrtGetDeviceCount(uint32_t *count)",
    "aclError aclrtSetDevice(int32_t deviceId)",
    "aclError aclrtResetDevice(int32_t deviceId)",
    "const char *aclrtGetSocName()",
    "aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total)",
    "aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)",
    "aclError aclrtFree(void *devPtr)",
    "aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind)",
    "aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)",
    "aclError aclrtCreateStream(aclrtStream *stream)",
    "aclError aclrtDestroyStream(aclrtStream stream)",
    "aclError aclrtSynchronizeStream(aclrtStream stream)",
    "const char *aclGetRecentErrMsg()",
    "aclError aclsysGetCANNVersion(aclCANNPackageName name, aclCANNPackageVersion *version)",
    "aclError aclsysGetVersionStr(char *pkgName, char *versionStr)",
)

# Present only in some CANN releases; looked up lazily so their absence is not a load error.
OPTIONAL_RUNTIME_FUNCTIONS = frozenset({"aclsysGetCANNVersion", "aclsysGetVersionStr"})

# libnnopbase.so: descriptors
NNOPBASE_PROTOTYPES: tuple[str, ...] = (
    "aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,"
    " const int64_t *stride, int64_t offset, aclFormat format,"
    " const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData)",
    "aclnnStatus aclDestroyTensor(const aclTensor *tensor)",
    "aclScalar *aclCreateScalar(void *value, aclDataType dataType)",
    "aclnnStatus aclDestroyScalar(const aclScalar *scalar)",
    "aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size)",
    "aclnnStatus aclDestroyIntArray(const aclIntArray *array)",
    "aclFloatArray *aclCreateFloatArray(const float *value, uint64_t size)",
    "aclnnStatus aclDestroyFloatArray(const aclFloatArray *array)",
    "aclBoolArray *aclCreateBoolArray(const bool *value, uint64_t size)",
    "aclnnStatus aclDestroyBoolArray(const aclBoolArray *array)",
)

_WS = "uint64_t *workspaceSize, aclOpExecutor **executor"

# libopapi.so (or its libopapi_math/_nn split): first phase of each op. The second phase is the
# same four-argument form for every op (OP_SECOND_PHASE).
OP_FIRST_PHASE_PROTOTYPES: tuple[str, ...] = (
    "aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor* self, const aclTensor* other,"
    f" const aclScalar* alpha, aclTensor* out, {_WS})",
    "aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor* self, const aclTensor* other, aclTensor* out,"
    f" {_WS})",
    "aclnnStatus aclnnDivGetWorkspaceSize(const aclTensor* self, const aclTensor* other, aclTensor* out,"
    f" {_WS})",
    f"aclnnStatus aclnnSiluGetWorkspaceSize(const aclTensor* self, aclTensor* out, {_WS})",
    f"aclnnStatus aclnnGeluGetWorkspaceSize(const aclTensor* self, aclTensor* out, {_WS})",
    f"aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor* self, int64_t dim, aclTensor* out, {_WS})",
    "aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor* self, const aclTensor* mat2, aclTensor* out,"
    f" int8_t cubeMathType, {_WS})",
    "aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor* self, const aclDataType dtype, aclTensor* out,"
    f" {_WS})",
    "aclnnStatus aclnnLayerNormGetWorkspaceSize(const aclTensor* input, const aclIntArray* normalizedShape,"
    " const aclTensor* weightOptional, const aclTensor* biasOptional, double eps, aclTensor* out,"
    f" aclTensor* meanOutOptional, aclTensor* rstdOutOptional, {_WS})",
    "aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor* x, const aclTensor* gamma, double epsilon,"
    f" const aclTensor* yOut, const aclTensor* rstdOut, {_WS})",
)

OP_SECOND_PHASE = (
    "aclnnStatus {name}(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)"
)

# C type (canonical spelling, see canonical_type) -> ctypes type. Every pointer to an opaque
# handle is a void*; enums have no fixed underlying type and are int on Linux x86_64/aarch64.
_HANDLE_TYPES = (
    "aclTensor", "aclScalar", "aclIntArray", "aclFloatArray", "aclBoolArray", "aclTensorList",
    "aclScalarList", "aclOpExecutor",
)
_SCALAR_CTYPES: dict[str, type] = {
    "aclError": ctypes.c_int,
    "aclnnStatus": ctypes.c_int32,
    "int": ctypes.c_int,
    "int8_t": ctypes.c_int8,
    "int32_t": ctypes.c_int32,
    "uint32_t": ctypes.c_uint32,
    "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "bool": ctypes.c_bool,  # C++ bool: one byte
    "aclDataType": ctypes.c_int,
    "aclFormat": ctypes.c_int,
    "aclrtMemAttr": ctypes.c_int,
    "aclrtMemcpyKind": ctypes.c_int,
    "aclrtMemMallocPolicy": ctypes.c_int,
    "aclCANNPackageName": ctypes.c_int,
    "aclrtStream": ctypes.c_void_p,
    "void*": ctypes.c_void_p,
    "const void*": ctypes.c_void_p,
    "const char*": ctypes.c_char_p,
    # an output buffer the callee writes into: pass a ctypes.create_string_buffer
    "char*": ctypes.POINTER(ctypes.c_char),
    "void**": ctypes.POINTER(ctypes.c_void_p),
    "aclrtStream*": ctypes.POINTER(ctypes.c_void_p),
    "aclOpExecutor**": ctypes.POINTER(ctypes.c_void_p),
    "uint32_t*": ctypes.POINTER(ctypes.c_uint32),
    "uint64_t*": ctypes.POINTER(ctypes.c_uint64),
    "size_t*": ctypes.POINTER(ctypes.c_size_t),
    "const int64_t*": ctypes.POINTER(ctypes.c_int64),
    "const float*": ctypes.POINTER(ctypes.c_float),
    "const bool*": ctypes.POINTER(ctypes.c_bool),
    "aclCANNPackageVersion*": ctypes.POINTER(AclCANNPackageVersion),
}
for _handle in _HANDLE_TYPES:
    _SCALAR_CTYPES[f"{_handle}*"] = ctypes.c_void_p
    _SCALAR_CTYPES[f"const {_handle}*"] = ctypes.c_void_p


@dataclass(frozen=True)
class Prototype:
    """One parsed C declaration: return type and parameter types in canonical spelling."""

    name: str
    restype: str | None  # None where the declaration text omits it (acl-facts' op lines)
    argtypes: tuple[str, ...]


_TOKEN = re.compile(r"\*|[A-Za-z_]\w*")
_TYPE_WORDS = {"const", "unsigned", "signed", "struct"}


def canonical_type(text: str) -> str:
    """Spell a C type one way: ``const int64_t *`` -> ``const int64_t*``, ``aclOpExecutor **`` ->
    ``aclOpExecutor**``; a top-level ``const`` on a value type is dropped (it is not ABI)."""
    out = ""
    for token in _TOKEN.findall(text):
        if token == "*":
            out += "*"
        else:
            out += (" " if out else "") + token
    if "*" not in out and out.startswith("const "):
        out = out[len("const "):]
    return out


def _param_type(param: str) -> str:
    """Drop a trailing parameter name: ``const aclTensor* self`` -> ``const aclTensor*``."""
    tokens = _TOKEN.findall(param)
    if len(tokens) >= 2 and tokens[-1] not in ("*",) and tokens[-2] not in _TYPE_WORDS:
        # the last identifier is a name when something (a type word or '*') precedes it
        tokens = tokens[:-1]
    return canonical_type(" ".join(tokens))


def parse_prototype(text: str) -> Prototype:
    """Parse ``restype name(params)`` (no trailing semicolon needed)."""
    match = re.fullmatch(r"\s*(.*?)\s*\b(\w+)\s*\((.*)\)\s*;?\s*", text, re.S)
    if not match:
        raise ValueError(f"not a C prototype: {text!r}")
    restype_text, name, params_text = match.groups()
    params = [p for p in (s.strip() for s in params_text.split(",")) if p and p != "void"]
    return Prototype(
        name=name,
        restype=canonical_type(restype_text) if restype_text.strip() else None,
        argtypes=tuple(_param_type(p) for p in params),
    )


def ctypes_type(c_type: str) -> type:
    try:
        return _SCALAR_CTYPES[c_type]
    except KeyError:
        raise KeyError(f"no ctypes mapping for C type {c_type!r}") from None


def ctypes_signature(proto: Prototype) -> tuple[type, list[type]]:
    """(restype, argtypes) for ctypes; a missing return type means ``aclnnStatus``."""
    restype = ctypes_type(proto.restype or "aclnnStatus")
    return restype, [ctypes_type(t) for t in proto.argtypes]


def op_names() -> tuple[str, ...]:
    """The aclnn op names bound (``aclnnAdd``...), derived from the first-phase table."""
    return tuple(
        parse_prototype(p).name.removesuffix("GetWorkspaceSize") for p in OP_FIRST_PHASE_PROTOTYPES
    )


def all_prototypes() -> dict[str, Prototype]:
    """Every bound function by name, second phases included."""
    texts = list(RUNTIME_PROTOTYPES) + list(NNOPBASE_PROTOTYPES) + list(OP_FIRST_PHASE_PROTOTYPES)
    texts += [OP_SECOND_PHASE.format(name=name) for name in op_names()]
    protos = {}
    for text in texts:
        proto = parse_prototype(text)
        protos[proto.name] = proto
    return protos
