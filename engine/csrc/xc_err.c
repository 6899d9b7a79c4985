/*
 * xc_err.c -- the thread-local error record and status names.
 *
 * Every failing path in the engine ends in xc_fail(), which formats one
 * message into the calling thread's record.  Thread-local storage keeps the
 * reader and cache re-entrant: two threads that fail at once each read their
 * own message, and the Python binding reads it right after the call on the
 * same thread (cffi releases the GIL around the call, not between the call
 * and the read).
 */
#include "xc_internal.h"

#include <stdio.h>
#include <string.h>

static _Thread_local xc_error tls_error = {0, -1, -1, -1, {0}};

const xc_error *xc_last_error(void) { return &tls_error; }

int xc_fail(int code, int64_t offset, int32_t layer, int32_t expert,
            const char *fmt, ...)
{
    va_list ap;
    tls_error.code = code;
    tls_error.offset = offset;
    tls_error.layer = layer;
    tls_error.expert = expert;
    va_start(ap, fmt);
    vsnprintf(tls_error.message, sizeof tls_error.message, fmt, ap);
    va_end(ap);
    return code;
}

int xc_fail_copy(const xc_error *e)
{
    tls_error = *e;
    tls_error.message[sizeof tls_error.message - 1] = '\0';
    return e->code;
}

const char *xc_status_name(int code)
{
    switch (code) {
    case XC_OK: return "ok";
    case XC_E_NOMEM: return "nomem";
    case XC_E_IO: return "io";
    case XC_E_SHORT_READ: return "short_read";
    case XC_E_CHANGED: return "changed";
    case XC_E_NOT_FOUND: return "not_found";
    case XC_E_ALL_PINNED: return "all_pinned";
    case XC_E_MISUSE: return "misuse";
    case XC_E_BUDGET: return "budget";
    case XC_E_FORMAT_TOO_SHORT: return "too_short";
    case XC_E_FORMAT_HEADER_TOO_LARGE: return "header_too_large";
    case XC_E_FORMAT_HEADER_PAST_END: return "header_past_end";
    case XC_E_FORMAT_NOT_UTF8: return "not_utf8";
    case XC_E_FORMAT_JSON: return "json";
    case XC_E_FORMAT_SCHEMA: return "schema";
    case XC_E_FORMAT_DTYPE: return "dtype";
    case XC_E_FORMAT_DUPLICATE: return "duplicate";
    case XC_E_FORMAT_OFFSETS: return "offsets";
    case XC_E_FORMAT_OVERFLOW: return "overflow";
    case XC_E_FORMAT_BITS: return "bits";
    case XC_E_FORMAT_SIZE: return "size";
    case XC_E_FORMAT_LENGTH: return "length";
    case XC_E_FORMAT_INDEX: return "index";
    default: return "unknown";
    }
}

/* Dtype table: header spelling and bits per element, indexed by XC_DT_*. */
static const struct {
    const char *name;
    int bits;
} dtype_table[XC_DT_COUNT] = {
    [XC_DT_BOOL] = {"BOOL", 8},
    [XC_DT_U8] = {"U8", 8},
    [XC_DT_I8] = {"I8", 8},
    [XC_DT_F8_E5M2] = {"F8_E5M2", 8},
    [XC_DT_F8_E4M3] = {"F8_E4M3", 8},
    [XC_DT_F8_E8M0] = {"F8_E8M0", 8},
    [XC_DT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [XC_DT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [XC_DT_I16] = {"I16", 16},
    [XC_DT_U16] = {"U16", 16},
    [XC_DT_F16] = {"F16", 16},
    [XC_DT_BF16] = {"BF16", 16},
    [XC_DT_I32] = {"I32", 32},
    [XC_DT_U32] = {"U32", 32},
    [XC_DT_F32] = {"F32", 32},
    [XC_DT_I64] = {"I64", 64},
    [XC_DT_U64] = {"U64", 64},
    [XC_DT_F64] = {"F64", 64},
    [XC_DT_C64] = {"C64", 64},
    [XC_DT_F4] = {"F4", 4},
    [XC_DT_F6_E2M3] = {"F6_E2M3", 6},
    [XC_DT_F6_E3M2] = {"F6_E3M2", 6},
};

const char *xc_dtype_name(int dtype)
{
    if (dtype < 0 || dtype >= XC_DT_COUNT)
        return NULL;
    return dtype_table[dtype].name;
}

int xc_dtype_bits(int dtype)
{
    if (dtype < 0 || dtype >= XC_DT_COUNT)
        return 0;
    return dtype_table[dtype].bits;
}
