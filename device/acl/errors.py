"""Error types and the symbolic names of ACL / aclnn status codes (acl-facts.md section 2)."""

from __future__ import annotations

from device.base import DeviceError

# Status code -> symbolic name, as the public headers spell it (acl_base.h, rt_error_codes.h,
# op_errno.h). Kept as data so a failure message names the code without a header at hand.
ERROR_NAMES: dict[int, str] = {
    0: "ACL_SUCCESS",
    # acl_base.h
    100000: "ACL_ERROR_INVALID_PARAM",
    100001: "ACL_ERROR_UNINITIALIZE",
    100002: "ACL_ERROR_REPEAT_INITIALIZE",
    100003: "ACL_ERROR_INVALID_FILE",
    100004: "ACL_ERROR_WRITE_FILE",
    100005: "ACL_ERROR_INVALID_FILE_SIZE",
    100006: "ACL_ERROR_PARSE_FILE",
    100024: "ACL_ERROR_OP_NOT_FOUND",
    100026: "ACL_ERROR_UNSUPPORTED_DATA_TYPE",
    100027: "ACL_ERROR_FORMAT_NOT_MATCH",
    100037: "ACL_ERROR_REPEAT_FINALIZE",
    100039: "ACL_ERROR_COMPILING_STUB_MODE",
    148049: "ACL_ERROR_INVALID_OPP_PATH",
    200000: "ACL_ERROR_BAD_ALLOC",
    200001: "ACL_ERROR_API_NOT_SUPPORT",
    200002: "ACL_ERROR_INVALID_DEVICE",
    200003: "ACL_ERROR_MEMORY_ADDRESS_UNALIGNED",
    200004: "ACL_ERROR_RESOURCE_NOT_MATCH",
    200005: "ACL_ERROR_INVALID_RESOURCE_HANDLE",
    200006: "ACL_ERROR_FEATURE_UNSUPPORTED",
    300000: "ACL_ERROR_STORAGE_OVER_LIMIT",
    500000: "ACL_ERROR_INTERNAL_ERROR",
    500001: "ACL_ERROR_FAILURE",
    500002: "ACL_ERROR_GE_FAILURE",
    500003: "ACL_ERROR_RT_FAILURE",
    500004: "ACL_ERROR_DRV_FAILURE",
    500005: "ACL_ERROR_PROFILING_FAILURE",
    # rt_error_codes.h
    107000: "ACL_ERROR_RT_PARAM_INVALID",
    107001: "ACL_ERROR_RT_INVALID_DEVICEID",
    107002: "ACL_ERROR_RT_CONTEXT_NULL",
    107003: "ACL_ERROR_RT_STREAM_CONTEXT",
    107008: "ACL_ERROR_RT_ADDR_UNALIGNED",
    107016: "ACL_ERROR_RT_INVALID_MEMORY_TYPE",
    107017: "ACL_ERROR_RT_INVALID_HANDLE",
    107018: "ACL_ERROR_RT_INVALID_MALLOC_TYPE",
    107019: "ACL_ERROR_RT_WAIT_TIMEOUT",
    107020: "ACL_ERROR_RT_TASK_TIMEOUT",
    207000: "ACL_ERROR_RT_FEATURE_NOT_SUPPORT",
    207001: "ACL_ERROR_RT_MEMORY_ALLOCATION",
    207002: "ACL_ERROR_RT_MEMORY_FREE",
    207004: "ACL_ERROR_RT_NO_DEVICE",
    207005: "ACL_ERROR_RT_RESOURCE_ALLOC_FAIL",
    207006: "ACL_ERROR_RT_NO_PERMISSION",
    207018: "ACL_ERROR_RT_DEVICE_OOM",
    507000: "ACL_ERROR_RT_INTERNAL_ERROR",
    507001: "ACL_ERROR_RT_TS_ERROR",
    507008: "ACL_ERROR_RT_SOC_VERSION",
    507011: "ACL_ERROR_RT_MODEL_EXECUTE",
    507014: "ACL_ERROR_RT_AICORE_TIMEOUT",
    507015: "ACL_ERROR_RT_AICORE_EXCEPTION",
    507018: "ACL_ERROR_RT_AICPU_EXCEPTION",
    507033: "ACL_ERROR_RT_DEV_SETUP_ERROR",
    507034: "ACL_ERROR_RT_VECTOR_CORE_TIMEOUT",
    507035: "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION",
    507046: "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT",
    507899: "ACL_ERROR_RT_DRV_INTERNAL_ERROR",
    507900: "ACL_ERROR_RT_AICPU_INTERNAL_ERROR",
    507901: "ACL_ERROR_RT_SOCKET_CLOSE",
    # op_errno.h (aclnnStatus)
    161001: "ACLNN_ERR_PARAM_NULLPTR",
    161002: "ACLNN_ERR_PARAM_INVALID",
    361001: "ACLNN_ERR_RUNTIME_ERROR",
    561000: "ACLNN_ERR_INNER",
    561001: "ACLNN_ERR_INNER_INFERSHAPE_ERROR",
    561002: "ACLNN_ERR_INNER_TILING_ERROR",
    561003: "ACLNN_ERR_INNER_FIND_KERNEL_ERROR",
    561101: "ACLNN_ERR_INNER_CREATE_EXECUTOR",
    561102: "ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR",
    561103: "ACLNN_ERR_INNER_NULLPTR",
    561107: "ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND",
    561112: "ACLNN_ERR_INNER_OPP_KERNEL_PKG_NOT_FOUND",
}

ACL_SUCCESS = 0
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_ERROR_COMPILING_STUB_MODE = 100039


def error_name(code: int) -> str:
    """The symbolic name of a status code, or ``UNKNOWN_<code>`` for one the table lacks."""
    return ERROR_NAMES.get(code, f"UNKNOWN_{code}")


class AclError(DeviceError):
    """A bound ACL/aclnn call failed.

    ``code`` is the returned status, or None when a creator returned a NULL handle (those calls
    have no status). ``message`` is ``aclGetRecentErrMsg()`` right after the failure ("" if none).
    """

    def __init__(self, function: str, code: int | None, message: str = "") -> None:
        self.function = function
        self.code = code
        self.code_name = "NULL handle" if code is None else error_name(code)
        self.message = message
        what = "returned NULL" if code is None else f"failed with {code} ({self.code_name})"
        text = f"{function} {what}"
        if message:
            text += f": {message}"
        super().__init__(text)


class AclLibraryNotFound(DeviceError):
    """The CANN runtime (or an op library) could not be found or loaded; message is one line."""
