/*
 * xc_kinds.h -- the read kinds and trace outcomes: one list of each.
 *
 * A read kind says who asked for a load -- a get (a demand access), a
 * prefetch (getmany or prefetch), a speculative prefetch, a stream -- and
 * decides the publish rule (freq, the unused marks, which counters move,
 * xc_slot_finish).  The same number is the kind field of a trace record,
 * and an outcome says what became of the key a record names
 * (docs/TRACE_FORMAT.md).  Both numbers are stored in trace files, so
 * they never change: a new kind or outcome goes at the end of its list.
 *
 * Each list below makes the C enum (XC_KIND_<N>, XC_OUT_<N>) and the name
 * table xc_read_kind_name / xc_trace_outcome_name (xc.h, xc_trace.c)
 * through which Python reads the names (engine._lib.read_kind_names,
 * trace_outcome_names); nothing else spells them.  The oracle keeps its
 * own copy of the names on purpose (oracle/traces/engine_dump.py: it decodes trace
 * files without the engine), and tests/boundary/test_trace_vocabulary.py
 * holds that copy equal to these.
 */
#ifndef XC_KINDS_H
#define XC_KINDS_H

/* X(enumerator suffix, name): in number order from 0. */
#define XC_READ_KINDS(X) \
    X(GET, "get")                 /* 0: a get (demand access) */ \
    X(PREFETCH, "prefetch")       /* 1: getmany or prefetch */ \
    X(SPEC, "speculative")        /* 2: a speculative prefetch */ \
    X(STREAM, "stream")           /* 3: a stream's key */

#define XC_TRACE_OUTCOMES(X) \
    X(HIT, "hit")                 /* 0: resident: a hit */ \
    X(MISS, "miss")               /* 1: a miss, its slot reserved */ \
    X(WAIT_HIT, "wait_hit")       /* 2: a hit after waiting for a read */ \
    X(RESIDENT, "resident")       /* 3: a batch key already resident */ \
    X(INFLIGHT, "inflight")       /* 4: a batch key already in flight */ \
    X(ISSUED, "issued")           /* 5: a batch key's read reserved */ \
    X(NO_SLOT, "no_slot")         /* 6: a batch key that found no slot */ \
    X(DUPLICATE, "duplicate")     /* 7: named earlier in the same call */

#define XC_KIND_ENUM_(n, name) XC_KIND_##n,
enum { XC_READ_KINDS(XC_KIND_ENUM_) XC_N_KINDS };
#undef XC_KIND_ENUM_
#define XC_OUT_ENUM_(n, name) XC_OUT_##n,
enum { XC_TRACE_OUTCOMES(XC_OUT_ENUM_) XC_N_OUTCOMES };
#undef XC_OUT_ENUM_

/* The numbers trace files hold (docs/TRACE_FORMAT.md) stay put. */
_Static_assert(XC_KIND_GET == 0 && XC_KIND_STREAM == 3 && XC_N_KINDS == 4,
               "read kinds are stored in trace files");
_Static_assert(XC_OUT_HIT == 0 && XC_OUT_DUPLICATE == 7 &&
               XC_N_OUTCOMES == 8, "outcomes are stored in trace files");

#endif /* XC_KINDS_H */
