"""The oracle's model of O_DIRECT reads (oracle/reads.py), on k3-mini's offsets.

k3-mini's expert e is the run [20608 + 1632 e, 22240 + 1632 e) of a
59,776-byte shard (tests/helpers.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xcache.oracle.reads import Window, direct_reads, probe_direct, widen, window_ok


def test_widen_rounds_both_ends_to_the_alignment() -> None:
    """Expert 0 [20608, 22240) widens to [20480, 24576)."""
    assert widen(20608, 1632) == (20480, 24576)
    assert widen(8192, 4096) == (8192, 12288)


def test_widen_refuses_an_alignment_that_is_not_a_power_of_two() -> None:
    """An alignment of 3000 is a ValueError naming it."""
    with pytest.raises(ValueError, match="align must be a power of two, got 3000"):
        widen(0, 1, 3000)


def test_one_window_without_chunks() -> None:
    """Expert 2 [23872, 25504) is one window of 8,192 bytes, whole at 25,504."""
    assert direct_reads(23872, 1632) == [Window(20480, 8192, 25504)]


def test_chunks_cut_the_widened_run_at_multiples() -> None:
    """With 4 KiB chunks expert 2 is two windows; the first is whole at its end."""
    assert direct_reads(23872, 1632, 4096) == [
        Window(20480, 4096, 24576), Window(24576, 4096, 25504)]


def test_chunks_must_be_a_multiple_of_the_alignment() -> None:
    """chunk_bytes 256 is a ValueError naming it and the alignment."""
    with pytest.raises(ValueError, match="chunk_bytes 256 is not a multiple "
                       "of the O_DIRECT alignment 4096"):
        direct_reads(0, 10, 256)


def test_a_window_past_the_end_of_the_file_is_whole_once_the_payload_arrived(
) -> None:
    """Expert 23 [58144, 59776) at the file's end: 2,432 of 4,096 bytes suffice."""
    [w] = direct_reads(58144, 1632)
    assert w == Window(57344, 4096, 59776)
    assert window_ok(w, 59776 - 57344)
    assert not window_ok(w, 59776 - 57344 - 1)
    assert not window_ok(w, 0)


def test_probe_of_a_missing_file_is_false(tmp_path: Path) -> None:
    """A path that does not exist does not read with O_DIRECT."""
    assert probe_direct(str(tmp_path / "absent")) is False


def test_probe_of_a_file_is_a_bool(tmp_path: Path) -> None:
    """A real file gives True or False (the filesystem decides), never raises."""
    f = tmp_path / "f"
    f.write_bytes(b"x" * 8192)
    assert probe_direct(str(f)) in (True, False)
