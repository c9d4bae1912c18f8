"""The llama.cpp support CSV: exact columns and quoting, readable by create_ops_docs.py's reader."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from reports.csv_export import format_support_csv, support_rows, write_support_csv
from results.load import load_results
from tests.reports.synth import header, make_case, write_results

HEADER_LINE = (
    '"backend_name","op_name","op_params","test_mode","supported","error_message","backend_reg_name"'
)


def test_columns_and_quoting_match_test_backend_ops(tmp_path: Path) -> None:
    case = make_case("GELU_QUICK", device="ggml:CANN0", src0="f16", dst="f16",
                     case_id="GELU_QUICK(type=f16,ne_a=[128,2,2,2],v=0)")
    path = write_results(tmp_path / "r.jsonl", [case])
    out = tmp_path / "CANN.csv"
    assert write_support_csv([path], out) == 1
    assert out.read_text() == HEADER_LINE + "\n" + \
        '"CANN0","GELU_QUICK","type=f16,ne_a=[128,2,2,2],v=0","support","1","yes","CANN"\n'


def test_supported_answers_and_null(tmp_path: Path) -> None:
    cases = [
        make_case("ADD", outcome="unsupported", supported=False, index=1),
        make_case("ADD", outcome="fail", supported=True, index=2),  # claimed: "1" even though it fails
        make_case("ADD", outcome="pass", supported=None, index=3),  # cannot tell, it ran: "1"
        make_case("ADD", outcome="unsupported", supported=None, index=4),  # cannot tell, declined: "0"
        make_case("ADD", outcome="pass", index=3),  # a repeat of case 3: one row only
    ]
    rows = support_rows([load_results(write_results(tmp_path / "r.jsonl", cases))])
    assert [(row[4], row[5]) for row in rows] == [("0", "no"), ("1", "yes"), ("1", "yes"), ("0", "no")]


def test_reg_name_from_inventory_or_derived(tmp_path: Path) -> None:
    head = header(devices=["ggml:CANN0"])
    head["devices"][0]["backend"] = "CANN-reg"
    with_inventory = write_results(tmp_path / "a.jsonl", [make_case(device="ggml:CANN0")], header_record=head)
    without = write_results(tmp_path / "b.jsonl", [make_case(device="ggml:Vulkan1", run_id="r2")],
                            header_record=header(run_id="r2", devices=[]))
    rows = support_rows([load_results(with_inventory), load_results(without)])
    assert [(row[0], row[6]) for row in rows] == [("CANN0", "CANN-reg"), ("Vulkan1", "Vulkan")]


def test_create_ops_docs_reader_accepts_it() -> None:
    text = format_support_csv([("CANN0", "ADD", 'type=f32,name="x"', "support", "1", "yes", "CANN")])
    (row,) = csv.DictReader(io.StringIO(text, newline=""))
    assert row["test_mode"] == "support" and row["error_message"] == "yes"
    assert row["backend_reg_name"] == "CANN" and row["op_params"] == 'type=f32,name="x"'
