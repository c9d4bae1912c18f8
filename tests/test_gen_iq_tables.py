"""scripts/gen_iq_tables.py: what it parses from a header, how it writes it, and its refusals.

Whether the written tables are ggml's is tests/test_formats_iq_grids_vs_ggml.py's question (against
the library's ``to_float``); here a small header made up for the test pins the parsing itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import gen_iq_tables  # noqa: E402

from golden.formats import grids  # noqa: E402


def _header(overrides: dict[str, str] | None = None) -> str:
    """Every table the script wants, with small made-up bodies (sizes as declared)."""
    bodies = {
        "kmask_iq2xs": ("uint8_t", "8", "1, 2, 4, 8, 16, 32, 64, 128"),
        "ksigns_iq2xs": ("uint8_t", "2", "0, 129,"),
        "iq2xxs_grid": ("uint64_t", "2", "0x0807060504030201, 0x2b1908082b190808,"),
        "iq2xs_grid": ("uint64_t", "1", "0x0808080808080808"),
        "iq2s_grid": ("uint64_t", "1", "0x0808080808080808"),
        "iq3xxs_grid": ("uint32_t", "2", "0x04040404, 0x3e2c1c0c,"),
        "iq3s_grid": ("uint32_t", "1", "0x01010101"),
        "iq1s_grid": ("uint64_t", "NGRID_IQ1S", "0xffffffffffffff01, 0x00000000000001ff"),
        "kvalues_iq4nl": ("int8_t", "3", "-127, -104, 113"),
        "ksigns64": ("uint64_t", "1", "0xff"),  # not wanted: skipped
    }
    for name, body in (overrides or {}).items():
        bodies[name] = (bodies[name][0], bodies[name][1], body)
    lines = ["#define GGML_TABLE_BEGIN(type, name, size) static const type name[size] = {",
             "#define GGML_TABLE_END() };", "#define NGRID_IQ1S 2", "#define IQ1S_DELTA 0.125f  // the shift",
             "#define IQ1M_DELTA 0.125f"]
    for name, (ctype, size, body) in bodies.items():
        lines += [f"GGML_TABLE_BEGIN({ctype}, {name}, {size})", f"    {body} // a comment, 0x99", "GGML_TABLE_END()"]
    return "\n".join(lines) + "\n"


def test_grid_entries_become_their_bytes_in_memory_order() -> None:
    tables, constants = gen_iq_tables.parse(_header())
    np.testing.assert_array_equal(tables["iq2xxs_grid"], [[1, 2, 3, 4, 5, 6, 7, 8], [8, 8, 25, 43, 8, 8, 25, 43]])
    np.testing.assert_array_equal(tables["iq3xxs_grid"], [[4, 4, 4, 4], [12, 28, 44, 62]])
    np.testing.assert_array_equal(tables["iq1s_grid"], [[1, -1, -1, -1, -1, -1, -1, -1], [-1, 1, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(tables["kvalues_iq4nl"][:, 0], [-127, -104, 113])
    assert tables["iq1s_grid"].dtype == np.int8 and "ksigns64" not in tables
    assert constants == {"IQ1S_DELTA": 0.125, "IQ1M_DELTA": 0.125}


def test_written_files_read_back_as_the_golden_reads_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    header = tmp_path / "ggml-common.h"
    header.write_text(_header())
    assert gen_iq_tables.main([str(header), "--out", str(tmp_path / "tables")]) == 0
    assert gen_iq_tables.main([str(header), "--out", str(tmp_path / "tables"), "--check"]) == 0
    monkeypatch.setattr(grids, "TABLES_DIR", tmp_path / "tables")
    grids.table.cache_clear()
    grids.iq1s_delta.cache_clear()
    try:
        np.testing.assert_array_equal(grids.table("iq2xxs_grid")[1], [8, 8, 25, 43, 8, 8, 25, 43])
        np.testing.assert_array_equal(grids.table("ksigns_iq2xs"), [0, 129])
        assert grids.iq1s_delta() == np.float32(0.125)
    finally:
        grids.table.cache_clear()
        grids.iq1s_delta.cache_clear()
    (tmp_path / "tables" / "iq3s_grid.txt").write_text("# edited\n1 1 1 2\n")
    assert gen_iq_tables.main([str(header), "--out", str(tmp_path / "tables"), "--check"]) == 1


@pytest.mark.parametrize(("overrides", "message"), [
    ({"iq3s_grid": "0x01010101, 0x03030303"}, "iq3s_grid has 2 entries, its declaration says 1"),
])
def test_a_wrong_header_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               overrides: dict[str, str], message: str) -> None:
    header = tmp_path / "ggml-common.h"
    header.write_text(_header(overrides))
    assert gen_iq_tables.main([str(header), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_missing_table_or_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header = tmp_path / "ggml-common.h"
    header.write_text(_header().replace("iq2s_grid", "iq2s_grid_renamed"))
    assert gen_iq_tables.main([str(header), "--out", str(tmp_path / "out")]) == 2
    assert "no GGML_TABLE_BEGIN for iq2s_grid" in capsys.readouterr().err
    assert gen_iq_tables.main([str(tmp_path / "absent.h")]) == 2
    assert "absent.h" in capsys.readouterr().err


def test_the_committed_tables_name_one_source() -> None:
    """Every file was written from the same header in one run (the sha256 in each first line agrees)."""
    first_lines = {path.read_text().splitlines()[0] for path in grids.TABLES_DIR.glob("*.txt")}
    assert len(first_lines) == 1 and "sha256" in first_lines.pop()
