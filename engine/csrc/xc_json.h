/*
 * xc_json.h -- the bounded JSON cursor the safetensors reader is built on;
 * internal, not part of the public boundary.
 *
 * The cursor walks a writable buffer of len bytes followed by at least
 * XJ_PAD readable bytes (zeros), so the 16-byte (SSE2) or 8-byte string
 * scans and the reader's fixed-size look-aheads (at most 16 bytes from a
 * position before len) may look past the end without a bounds test in the
 * inner loop: a zero byte is a control character, which stops every scan,
 * and never matches a quote.  Strings are decoded in place (an
 * escape never decodes to more bytes than it is written with) and
 * NUL-terminated there, so names cost no allocation.  Every failure is
 * reported through xc_fail with the file's path and the absolute byte offset
 * (base + position in the buffer).
 */
#ifndef XC_JSON_H
#define XC_JSON_H

#include "xc_internal.h"

#define XJ_PAD 16
/* The deepest nesting level accepted, the top-level value's bracket being
 * level 1: serde_json's recursion limit is 128 and refuses the 128th level
 * (the official reader, measured: an entry's field nested 126 deep, level
 * 128, is "recursion limit exceeded").  xj_skip(j, depth) is given the
 * level of the container holding the value.  A header needs 3. */
#define XJ_MAX_DEPTH 127

typedef struct xj {
    char *buf;         /* len bytes of JSON, then XJ_PAD zero bytes */
    size_t len;
    size_t pos;
    uint64_t base;     /* absolute file offset of buf[0] */
    const char *path;  /* named in every message */
} xj;

/* Whether p[0..n) is well-formed UTF-8 (no overlongs, surrogates or code
 * points above U+10FFFF).  On failure *bad_at is the index of the first
 * byte of the first ill-formed sequence. */
int xj_utf8_valid(const unsigned char *p, size_t n, size_t *bad_at);

/* Records code with "path: byte X: message" (X = base + at) and returns it. */
int xj_fail(const xj *j, int code, size_t at, const char *fmt, ...)
    XC_PRINTF(4, 5);

/* Skips JSON whitespace (space, tab, LF, CR). */
static inline void xj_ws(xj *j)
{
    while (j->pos < j->len) {
        char c = j->buf[j->pos];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t')
            return;
        j->pos++;
    }
}

/* The byte at the cursor, or -1 at the end of the buffer. */
static inline int xj_peek(const xj *j)
{
    return j->pos < j->len ? (unsigned char)j->buf[j->pos] : -1;
}

/* Skips whitespace, then consumes byte c or fails with XC_E_FORMAT_JSON. */
int xj_expect_ws(xj *j, char c);

/* xj_expect_ws, with the common case (c right at the cursor; c is never
 * whitespace, so skipping first would not move) inlined. */
static inline int xj_expect(xj *j, char c)
{
    if (j->pos < j->len && j->buf[j->pos] == c) {
        j->pos++;
        return XC_OK;
    }
    return xj_expect_ws(j, c);
}

/* Parses the string at the cursor (which must be '"'), decoding escapes in
 * place.  *out points at the NUL-terminated result inside buf, *out_len is
 * its length and *has_nul says whether it contains U+0000.  Syntax errors
 * (unterminated, control character, bad escape, lone surrogate) are
 * XC_E_FORMAT_JSON. */
int xj_string(xj *j, char **out, size_t *out_len, int *has_nul);

/* Parses a number at the cursor that must be a non-negative integer not
 * above max.  Malformed numbers and malformed values of any type are
 * XC_E_FORMAT_JSON; a well-formed value that is not a number, or a valid
 * number that is negative, fractional, has an exponent or exceeds max, is
 * type_code (XC_E_FORMAT_SCHEMA for headers). */
int xj_uint(xj *j, uint64_t max, int type_code, const char *what,
            uint64_t *out);

/* Validates and skips any JSON value at the cursor; depth is the nesting
 * level of the enclosing container.  Errors are XC_E_FORMAT_JSON. */
int xj_skip(xj *j, int depth);

/* Steps through the members of the object whose '{' the cursor has just
 * passed; *started is 0 before the first step.  xj_member returns 1 with
 * the next member's key decoded as by xj_string (has_nul may be NULL), its
 * byte position in *key_at and the cursor on its value, whitespace
 * skipped; 0 once the closing '}' is consumed; or the XC_E_FORMAT_JSON of
 * a malformed object.  The caller parses each value, so one loop serves
 * every object:
 *
 *     int started = 0;
 *     while ((rc = xj_member(j, &started, &k, &kn, &nul, &kat)) > 0)
 *         ... parse the value at the cursor; return on failure ...
 *     if (rc != XC_OK)
 *         return rc;
 *
 * xj_member_key stops right after the key, for an object whose keys are
 * checked before their colon (a key's own error comes first); the caller
 * then consumes ':' with xj_expect and skips whitespace, as xj_member
 * does.  Inline: the header parser takes one step per tensor. */
static inline int xj_member_key(xj *j, int *started, char **key,
                                size_t *key_len, int *has_nul,
                                size_t *key_at)
{
    int rc;
    xj_ws(j);
    if (!*started) {
        *started = 1;
        if (xj_peek(j) == '}') {
            j->pos++;
            return 0;
        }
    } else {
        if (xj_peek(j) != ',')
            return xj_expect(j, '}');
        j->pos++;
        xj_ws(j);
    }
    *key_at = j->pos;
    if ((rc = xj_string(j, key, key_len, has_nul)) != XC_OK)
        return rc;
    return 1;
}

static inline int xj_member(xj *j, int *started, char **key, size_t *key_len,
                            int *has_nul, size_t *key_at)
{
    int rc = xj_member_key(j, started, key, key_len, has_nul, key_at);
    if (rc <= 0)
        return rc;
    if ((rc = xj_expect(j, ':')) != XC_OK)
        return rc;
    xj_ws(j);
    return 1;
}

#endif /* XC_JSON_H */
