"""Every bound prototype against the prototypes quoted in acl-facts.md; ctypes widths; error table.

The doc's declarations and status codes are vendored in tests/data/reference_facts.json by
scripts/vendor_reference_facts.py (from ../shared/reference/acl-facts.md)."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest

from device.acl.errors import ERROR_NAMES, AclError, error_name
from device.acl.prototypes import (
    AclCANNPackageVersion,
    Prototype,
    all_prototypes,
    ctypes_signature,
    op_names,
    parse_prototype,
)

ACL_FACTS = json.loads((Path(__file__).resolve().parents[1] / "data" / "reference_facts.json")
                       .read_text(encoding="utf-8"))["acl_facts"]


def documented_prototypes() -> dict[str, list[Prototype]]:
    """The doc's C declarations, parsed as the bindings' prototypes are."""
    found: dict[str, list[Prototype]] = {}
    for declaration in ACL_FACTS["declarations"]:
        proto = parse_prototype(declaration)
        found.setdefault(proto.name, []).append(proto)
    return found


def test_every_bound_prototype_matches_the_documented_one() -> None:
    documented = documented_prototypes()
    second_phase_template = documented["aclnnXxx"][0]
    checked = 0
    for name, bound in all_prototypes().items():
        is_second_phase = name in op_names()
        references = [second_phase_template] if is_second_phase else documented.get(name)
        assert references, f"{name} is bound but acl-facts.md has no prototype for it"
        for reference in references:
            assert bound.argtypes == reference.argtypes, f"{name}: bound {bound.argtypes}, doc {reference}"
            if reference.restype is not None:  # the doc's op lines omit the (aclnnStatus) return type
                assert bound.restype == reference.restype, f"{name}: returns {bound.restype}, doc {reference}"
        checked += 1
    assert checked == len(all_prototypes()) >= 40


def test_the_doc_parser_sees_multi_line_and_nameless_parameters() -> None:
    documented = documented_prototypes()
    create = documented["aclCreateTensor"][0]
    assert create.restype == "aclTensor*"
    assert create.argtypes[-3:] == ("const int64_t*", "uint64_t", "void*")
    matmul = documented["aclnnMatmulGetWorkspaceSize"][0]
    assert matmul.argtypes[3:] == ("int8_t", "uint64_t*", "aclOpExecutor**")
    assert documented["aclrtGetSocName"][0] == Prototype("aclrtGetSocName", "const char*", ())


@pytest.mark.parametrize(
    ("function", "position", "expected"),
    [
        ("aclnnLayerNormGetWorkspaceSize", 4, ctypes.c_double),  # eps is double, not float
        ("aclnnRmsNormGetWorkspaceSize", 2, ctypes.c_double),
        ("aclnnMatmulGetWorkspaceSize", 3, ctypes.c_int8),  # cubeMathType
        ("aclnnSoftmaxGetWorkspaceSize", 1, ctypes.c_int64),  # dim
        ("aclnnCastGetWorkspaceSize", 1, ctypes.c_int),  # aclDataType enum
        ("aclrtMemcpy", 4, ctypes.c_int),  # aclrtMemcpyKind enum
        ("aclrtMalloc", 1, ctypes.c_size_t),
        ("aclCreateTensor", 4, ctypes.c_int64),  # offset
        ("aclCreateTensor", 1, ctypes.c_uint64),  # viewDimsNum
    ],
)
def test_ctypes_widths_follow_the_headers(function: str, position: int, expected: type) -> None:
    _, argtypes = ctypes_signature(all_prototypes()[function])
    assert argtypes[position] is expected


def test_scalar_sizes_are_what_the_abi_needs() -> None:
    assert ctypes.sizeof(ctypes.c_bool) == 1  # C++ bool in aclCreateBoolArray
    assert ctypes.sizeof(ctypes.c_int) == 4  # enums without a fixed underlying type
    _, argtypes = ctypes_signature(all_prototypes()["aclCreateBoolArray"])
    assert argtypes[0]._type_ is ctypes.c_bool


def test_package_version_struct_is_512_bytes_with_header_offsets() -> None:
    assert ctypes.sizeof(AclCANNPackageVersion) == 512
    fields = AclCANNPackageVersion._fields_
    offsets = {name: getattr(AclCANNPackageVersion, name).offset for name, _ in fields}
    assert offsets == {"version": 0, "majorVersion": 128, "minorVersion": 192, "releaseVersion": 256,
                       "patchVersion": 320, "reserved": 384}


def test_unknown_c_type_is_refused() -> None:
    with pytest.raises(KeyError, match="long double"):
        ctypes_signature(parse_prototype("aclError aclNope(long double x)"))


def test_error_table_codes_all_appear_in_acl_facts() -> None:
    spelled: dict[int, list[str]] = {}
    for code, name in ACL_FACTS["error_codes"]:
        spelled.setdefault(code, []).append(name)
    for code, name in ERROR_NAMES.items():
        assert code in spelled, f"{code} ({name}) not in acl-facts.md"
        suffix = name.split("_ERROR_")[-1].split("ACLNN_ERR_")[-1]
        assert any(suffix.split("_")[-1] in doc for doc in spelled[code]), f"{name} not spelled in acl-facts.md"


def test_error_names_and_message() -> None:
    assert error_name(207001) == "ACL_ERROR_RT_MEMORY_ALLOCATION"
    assert error_name(161002) == "ACLNN_ERR_PARAM_INVALID"
    assert error_name(4242) == "UNKNOWN_4242"
    error = AclError("aclrtMalloc", 207001, "out of memory")
    assert str(error) == "aclrtMalloc failed with 207001 (ACL_ERROR_RT_MEMORY_ALLOCATION): out of memory"
    assert (error.function, error.code, error.code_name, error.message) == (
        "aclrtMalloc", 207001, "ACL_ERROR_RT_MEMORY_ALLOCATION", "out of memory")
    assert str(AclError("aclCreateTensor", None)) == "aclCreateTensor returned NULL"
