"""Which tests judge a mutant besides the gate: the ``--pytest`` selections.

``--pytest behaviour`` runs :data:`BEHAVIOUR_TESTS`, the tests that catch
the catalogue's bugs by what the engine does; ``--pytest targeted`` runs
:func:`targeted_tests` of the mutated file, the suite that states that
file's contract (:data:`FILE_TESTS`, else the behaviour selection).  Paths
are relative to the checkout the mutant is planted in (``run.py``).
"""

from __future__ import annotations

__all__ = ["BEHAVIOUR_TESTS", "FILE_TESTS", "targeted_tests"]

#: ``--pytest behaviour``: the tests that catch the catalogue's bugs by what
#: the engine does (bytes, counters, slot states, errors, check()), not by
#: a message's wording or a time (docs/QUALITY.md, "Mutation").
BEHAVIOUR_TESTS: tuple[str, ...] = (
    "tests/cache/test_behaviour_twins.py",
    "tests/faults/test_partial_reads.py",
    "tests/faults/test_state_twins.py",
    "tests/faults/test_reads_under_way_twins.py",
    "tests/faults/test_index_corruptions.py",
    "tests/replay/test_probe_steps.py",
    "tests/faults/test_corruptions.py",
    "tests/policies/test_victims_by_hand.py",
    "tests/cache/test_k3_mini_bytes_and_counters.py",
    "tests/faults/test_io_faults_on_every_read_path.py",
    "tests/faults/test_injector.py",
    "tests/policies",
    "tests/lab/test_live_equals_simulator.py",
    "tests/lab/test_c_simulator.py",
    "tests/cache/test_engine_vs_oracle_stateful.py",
)
_READER_TESTS = ("tests/reader", "tests/faults/test_corruptions.py",
                 "tests/faults/test_index_corruptions.py")
_CACHE_TESTS = ("tests/cache/test_behaviour_twins.py",
                "tests/cache/test_hold_layer.py",
                "tests/cache/test_dropped_holds.py",
                "tests/cache/test_k3_mini_bytes_and_counters.py",
                "tests/cache/test_engine_vs_oracle_stateful.py",
                "tests/faults/test_state_twins.py",
                "tests/faults/test_reads_under_way_twins.py",
                "tests/async")
_POLICY_TESTS = ("tests/policies", "tests/lab/test_c_simulator.py",
                 "tests/lab/test_live_equals_simulator.py")
#: ``--pytest targeted``: the test files of each engine source (the rest:
#: BEHAVIOUR_TESTS).  Each is the suite that states that file's contract.
FILE_TESTS: dict[str, tuple[str, ...]] = {
    **{f: _READER_TESTS for f in ("xc_json.c", "xc_header.c", "xc_names.c",
                                  "xc_index.c", "xc_st.c", "xc_st_mem.c",
                                  "xc_reader.h", "xc_json.h")},
    **{f: _POLICY_TESTS for f in (
        "xc_policy.c", "xc_policy_arc.c", "xc_policy_fifo.c",
        "xc_policy_hotness.c", "xc_policy_lfru.c", "xc_policy_lfu.c",
        "xc_policy_lru.c", "xc_policy_s3fifo.c", "xc_order_buckets.c",
        "xc_order_heaps.c", "xc_order_list.c", "xc_order.h", "xc_policy.h")},
    "xc_sim.c": ("tests/lab/test_c_simulator.py", "tests/lab/test_sim_progress.py",
                 "tests/lab/test_simulator_limits.py",
                 "tests/lab/test_live_equals_simulator.py"),
    "xc_trace.c": ("tests/cache/test_recorded_trace.py",
                   "tests/cache/test_trace_file.py",
                   "tests/cache/test_trace_path_ownership.py",
                   "tests/boundary/test_trace_vocabulary.py"),
    "xc_check.c": ("tests/cache/test_check_names_broken_invariants.py",
                   "tests/replay/test_probe_steps.py", *_CACHE_TESTS),
    "xc_io.c": ("tests/faults/test_io_faults_on_every_read_path.py",
                "tests/faults/test_partial_reads.py",
                "tests/faults/test_io_countdowns.py",
                "tests/faults/test_only_regular_files.py",
                "tests/faults/test_files_changed_while_open.py",
                "tests/cache/test_io_settings_agree.py"),
    "xc_alloc.c": ("tests/faults/test_alloc_countdowns.py",
                   "tests/faults/test_alloc_every_entry_point.py",
                   "tests/boundary/test_alloc_seam_and_error_record.py"),
    "xc_err.c": ("tests/boundary/test_status_families.py",
                 "tests/boundary/test_alloc_seam_and_error_record.py",
                 "tests/faults/test_failure_kinds.py", *_READER_TESTS),
    "xc_load.c": ("tests/cache/test_fused_experts.py",
                  "tests/cache/test_fused_experts_refused.py",
                  "tests/cache/test_scattered_experts.py",
                  "tests/cache/test_reads_match_oracle.py",
                  "tests/faults/test_loader_nomem_message.py",
                  "tests/boundary/test_getmany_key_paths.py",
                  "tests/faults/test_files_changed_while_open.py",
                  *_CACHE_TESTS),
    **{f: (*_CACHE_TESTS, "tests/cache/test_cache_face.py",
           "tests/cache/test_threads.py", "tests/cache/test_lifetimes.py",
           "tests/boundary/test_getmany_key_paths.py",
           "tests/boundary/test_null_and_range_checks.py",
           "tests/faults/test_alloc_every_entry_point.py",
           "tests/faults/test_thread_start_failures.py")
       for f in ("xc_cache.c", "xc_batch.c", "xc_slot.c", "xc_stream.c",
                 "xc_core.h", "xc.h")},
}


def targeted_tests(file: str) -> str:
    """The ``--pytest targeted`` selection for a mutant of ``file``."""
    return " ".join(FILE_TESTS.get(file, BEHAVIOUR_TESTS))
