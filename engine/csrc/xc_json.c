/*
 * xc_json.c -- a small, strict, bounded JSON cursor.
 *
 * Only what a safetensors header and a shard index need: objects, arrays,
 * strings with every escape (\uXXXX surrogate pairs included), numbers by
 * the RFC 8259 grammar, and the three literals.  No tree is built: the
 * reader walks the header once and keeps only what it needs, which is what
 * makes a 29 MB header with 200,000 entries cheap.  Nesting is bounded
 * (XJ_MAX_DEPTH), every read is bounded by len, and numbers are parsed with
 * overflow checks rather than trusted.
 */
#include "xc_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ------------------------------------------------------------------ */
/* UTF-8                                                                */
/* ------------------------------------------------------------------ */

int xj_utf8_valid(const unsigned char *p, size_t n, size_t *bad_at)
{
    size_t i = 0;
    while (i < n) {
        /* ASCII runs dominate headers: test 32, then 8 bytes at a time. */
#if defined(__SSE2__)
        while (i + 32 <= n) {
            __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
            __m128i b = _mm_loadu_si128(
                (const __m128i *)(const void *)(p + i + 16));
            if (_mm_movemask_epi8(_mm_or_si128(a, b)) != 0)
                break;
            i += 32;
        }
#endif
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        unsigned c = p[i];
        size_t need;
        unsigned lo = 0x80, hi = 0xBF; /* bounds of the second byte */
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0; /* overlong */
            else if (c == 0xED)
                hi = 0x9F; /* UTF-16 surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90; /* overlong */
            else if (c == 0xF4)
                hi = 0x8F; /* above U+10FFFF */
        } else {
            *bad_at = i;
            return 0;
        }
        if (n - i - 1 < need) {
            *bad_at = i;
            return 0;
        }
        if (p[i + 1] < lo || p[i + 1] > hi) {
            *bad_at = i;
            return 0;
        }
        for (size_t k = 2; k <= need; k++) {
            if ((p[i + k] & 0xC0) != 0x80) {
                *bad_at = i;
                return 0;
            }
        }
        i += need + 1;
    }
    return 1;
}

/* ------------------------------------------------------------------ */
/* Errors and whitespace                                                */
/* ------------------------------------------------------------------ */

int xj_fail(const xj *j, int code, size_t at, const char *fmt, ...)
{
    char what[768];
    va_list ap;
    uint64_t abs_at = j->base + at;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return xc_fail(code, (int64_t)abs_at, -1, -1, "%s: byte %llu: %s",
                   j->path, (unsigned long long)abs_at, what);
}

static const char *describe(const xj *j)
{
    int c = xj_peek(j);
    if (c < 0)
        return "the end of the JSON";
    if (c == '"')
        return "a string";
    if (c == '{')
        return "an object";
    if (c == '[')
        return "an array";
    if (c == '-' || (c >= '0' && c <= '9'))
        return "a number";
    return "an unexpected character";
}

int xj_expect_ws(xj *j, char c)
{
    xj_ws(j);
    if (xj_peek(j) != (unsigned char)c)
        return xj_fail(j, XC_E_FORMAT_JSON, j->pos, "expected '%c', found %s",
                       c, describe(j));
    j->pos++;
    return XC_OK;
}

/* ------------------------------------------------------------------ */
/* Strings                                                              */
/* ------------------------------------------------------------------ */

/* The index of the first '"', '\\' or control byte (below 0x20) at or
 * after b[r].  The zero padding after len stops the scan: every load starts
 * at or before the first such byte, which is at most len (a pad zero), so
 * it reads at most len + 15 < len + XJ_PAD. */
#if defined(__SSE2__)
static inline size_t scan_plain(const char *b, size_t r)
{
    const __m128i q = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\');
    const __m128i c1f = _mm_set1_epi8(0x1f);
    for (;;) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(b + r));
        /* max(v, 0x1f) == 0x1f exactly when v <= 0x1f, unsigned. */
        __m128i m = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, q), _mm_cmpeq_epi8(v, bs)),
            _mm_cmpeq_epi8(_mm_max_epu8(v, c1f), c1f));
        unsigned mask = (unsigned)_mm_movemask_epi8(m);
        if (mask != 0)
            return r + (size_t)__builtin_ctz(mask);
        r += 16;
    }
}
#else
/* Nonzero if any byte of w is '"', '\\' or below 0x20.  Exact as to
 * whether one exists (a borrow can only flag a byte above a real hit). */
static inline uint64_t special_bytes(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    uint64_t zq = (q - ones) & ~q, zb = (b - ones) & ~b;
    uint64_t ctl = (w - ones * 0x20) & ~w;
    return (zq | zb | ctl) & high;
}

static inline size_t scan_plain(const char *b, size_t r)
{
    for (;;) {
        uint64_t word;
        memcpy(&word, b + r, 8);
        if (special_bytes(word))
            break;
        r += 8;
    }
    while ((unsigned char)b[r] >= 0x20 && b[r] != '"' && b[r] != '\\')
        r++;
    return r;
}
#endif

static int hex4(const xj *j, size_t at, unsigned *out)
{
    unsigned v = 0;
    if (j->len - at < 4)
        return xj_fail(j, XC_E_FORMAT_JSON, at, "truncated \\u escape");
    for (int k = 0; k < 4; k++) {
        char c = j->buf[at + (size_t)k];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return xj_fail(j, XC_E_FORMAT_JSON, at + (size_t)k,
                           "bad hex digit in \\u escape");
    }
    *out = v;
    return XC_OK;
}

static size_t put_utf8(char *dst, unsigned cp)
{
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | (cp >> 6));
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | (cp >> 12));
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | (cp >> 18));
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int xj_string(xj *j, char **out, size_t *out_len, int *has_nul)
{
    char *b = j->buf;
    size_t open_at = j->pos;
    size_t r = open_at + 1; /* read position */
    size_t w = r;           /* write position; w <= r always */
    int rc, nul = 0;

    if (xj_peek(j) != '"')
        return xj_fail(j, XC_E_FORMAT_JSON, j->pos, "expected a string, "
                       "found %s", describe(j));
    for (;;) {
        size_t run = r;
        /* The padding after len is zeros, which stop this scan. */
        r = scan_plain(b, r);
        if (w != run)
            memmove(b + w, b + run, r - run);
        w += r - run;
        if (r >= j->len)
            return xj_fail(j, XC_E_FORMAT_JSON, open_at,
                           "unterminated string");
        if (b[r] == '"')
            break;
        if (b[r] != '\\')
            return xj_fail(j, XC_E_FORMAT_JSON, r,
                           "control character 0x%02x in a string",
                           (unsigned)(unsigned char)b[r]);
        /* An escape: r is at the backslash. */
        if (r + 1 >= j->len)
            return xj_fail(j, XC_E_FORMAT_JSON, open_at,
                           "unterminated string");
        char e = b[r + 1];
        char plain = 0;
        switch (e) {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u': break;
        default:
            return xj_fail(j, XC_E_FORMAT_JSON, r, "bad escape '\\%c'",
                           (unsigned char)e >= 0x20 && (unsigned char)e < 0x7f
                               ? e : '?');
        }
        if (e != 'u') {
            b[w++] = plain;
            r += 2;
            continue;
        }
        unsigned cp, lo;
        if ((rc = hex4(j, r + 2, &cp)) != XC_OK)
            return rc;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return xj_fail(j, XC_E_FORMAT_JSON, r,
                           "lone low surrogate \\u%04X", cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (j->len - r < 12 || b[r + 6] != '\\' || b[r + 7] != 'u')
                return xj_fail(j, XC_E_FORMAT_JSON, r,
                               "lone high surrogate \\u%04X", cp);
            if ((rc = hex4(j, r + 8, &lo)) != XC_OK)
                return rc;
            if (lo < 0xDC00 || lo > 0xDFFF)
                return xj_fail(j, XC_E_FORMAT_JSON, r,
                               "high surrogate \\u%04X not followed by a low "
                               "surrogate", cp);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            r += 12;
        } else {
            r += 6;
        }
        if (cp == 0)
            nul = 1;
        w += put_utf8(b + w, cp);
    }
    /* r is at the closing quote; w <= r, so the terminator overwrites only
     * bytes already consumed. */
    b[w] = '\0';
    j->pos = r + 1;
    *out = b + open_at + 1;
    *out_len = w - (open_at + 1);
    if (has_nul)
        *has_nul = nul;
    return XC_OK;
}

/* ------------------------------------------------------------------ */
/* Numbers                                                              */
/* ------------------------------------------------------------------ */

static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* Whether a number the official reader turns into a double stays finite.
 *
 * The official safetensors reader parses every number of the header
 * (ignored fields included) with serde_json's default float path and
 * refuses a header whose number overflows it ("number out of range").
 * That path is not correctly rounded near the top of the range (it takes
 * 1.7976931348623158e308, the largest double's own shortest spelling, as
 * out of range), so "strtod gives inf" would not decide the same; this is
 * its algorithm, step for step, on doubles: a u64 significand of the
 * leading digits (digits that would overflow it only move the exponent,
 * or are dropped after the point), an i32 exponent (saturating), then
 * significand x 10^exponent by at most a few multiplies or divides by
 * table powers.  Integers that fit 64 bits never reach it.  s is one
 * number by the JSON grammar (number_syntax checked it). */
static const double pow10_tab[309] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13,
    1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25,
    1e26, 1e27, 1e28, 1e29, 1e30, 1e31, 1e32, 1e33, 1e34, 1e35, 1e36, 1e37,
    1e38, 1e39, 1e40, 1e41, 1e42, 1e43, 1e44, 1e45, 1e46, 1e47, 1e48, 1e49,
    1e50, 1e51, 1e52, 1e53, 1e54, 1e55, 1e56, 1e57, 1e58, 1e59, 1e60, 1e61,
    1e62, 1e63, 1e64, 1e65, 1e66, 1e67, 1e68, 1e69, 1e70, 1e71, 1e72, 1e73,
    1e74, 1e75, 1e76, 1e77, 1e78, 1e79, 1e80, 1e81, 1e82, 1e83, 1e84, 1e85,
    1e86, 1e87, 1e88, 1e89, 1e90, 1e91, 1e92, 1e93, 1e94, 1e95, 1e96, 1e97,
    1e98, 1e99, 1e100, 1e101, 1e102, 1e103, 1e104, 1e105, 1e106, 1e107,
    1e108, 1e109, 1e110, 1e111, 1e112, 1e113, 1e114, 1e115, 1e116, 1e117,
    1e118, 1e119, 1e120, 1e121, 1e122, 1e123, 1e124, 1e125, 1e126, 1e127,
    1e128, 1e129, 1e130, 1e131, 1e132, 1e133, 1e134, 1e135, 1e136, 1e137,
    1e138, 1e139, 1e140, 1e141, 1e142, 1e143, 1e144, 1e145, 1e146, 1e147,
    1e148, 1e149, 1e150, 1e151, 1e152, 1e153, 1e154, 1e155, 1e156, 1e157,
    1e158, 1e159, 1e160, 1e161, 1e162, 1e163, 1e164, 1e165, 1e166, 1e167,
    1e168, 1e169, 1e170, 1e171, 1e172, 1e173, 1e174, 1e175, 1e176, 1e177,
    1e178, 1e179, 1e180, 1e181, 1e182, 1e183, 1e184, 1e185, 1e186, 1e187,
    1e188, 1e189, 1e190, 1e191, 1e192, 1e193, 1e194, 1e195, 1e196, 1e197,
    1e198, 1e199, 1e200, 1e201, 1e202, 1e203, 1e204, 1e205, 1e206, 1e207,
    1e208, 1e209, 1e210, 1e211, 1e212, 1e213, 1e214, 1e215, 1e216, 1e217,
    1e218, 1e219, 1e220, 1e221, 1e222, 1e223, 1e224, 1e225, 1e226, 1e227,
    1e228, 1e229, 1e230, 1e231, 1e232, 1e233, 1e234, 1e235, 1e236, 1e237,
    1e238, 1e239, 1e240, 1e241, 1e242, 1e243, 1e244, 1e245, 1e246, 1e247,
    1e248, 1e249, 1e250, 1e251, 1e252, 1e253, 1e254, 1e255, 1e256, 1e257,
    1e258, 1e259, 1e260, 1e261, 1e262, 1e263, 1e264, 1e265, 1e266, 1e267,
    1e268, 1e269, 1e270, 1e271, 1e272, 1e273, 1e274, 1e275, 1e276, 1e277,
    1e278, 1e279, 1e280, 1e281, 1e282, 1e283, 1e284, 1e285, 1e286, 1e287,
    1e288, 1e289, 1e290, 1e291, 1e292, 1e293, 1e294, 1e295, 1e296, 1e297,
    1e298, 1e299, 1e300, 1e301, 1e302, 1e303, 1e304, 1e305, 1e306, 1e307,
    1e308
};

#define U64_OVF(a, d) ((a) >= UINT64_MAX / 10 && \
                       ((a) > UINT64_MAX / 10 || (d) > UINT64_MAX % 10))
#define I32_OVF(a, d) ((a) >= INT32_MAX / 10 && \
                       ((a) > INT32_MAX / 10 || (d) > INT32_MAX % 10))

static int32_t sat32(int64_t v)
{
    return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v;
}

/* serde_json's f64_from_parts: 1 when finite. */
static int finite_from_parts(uint64_t sig, int32_t exp)
{
    double f = (double)sig;
    for (;;) {
        int64_t a = exp < 0 ? -(int64_t)exp : exp;
        if (a <= 308 && exp != INT32_MIN) {
            if (exp >= 0) {
                f *= pow10_tab[a];
                return !isinf(f);
            }
            return 1; /* a division stays finite */
        }
        if (f == 0.0)
            return 1;
        if (exp >= 0)
            return 0;
        f /= 1e308;
        exp += 308;
    }
}

static int number_in_range(const char *s, size_t n)
{
    size_t i = 0;
    uint64_t sig = 0;
    int32_t exp = 0;
    int is_float = 0;
    if (s[i] == '-')
        i++;
    if (s[i] == '0') {
        i++;
    } else {
        while (i < n && is_digit(s[i])) {
            uint64_t d = (uint64_t)(s[i] - '0');
            if (U64_OVF(sig, d)) { /* the rest only moves the exponent */
                is_float = 1;
                for (; i < n && is_digit(s[i]); i++)
                    exp++;
                break;
            }
            sig = sig * 10 + d;
            i++;
        }
    }
    if (i < n && s[i] == '.') {
        is_float = 1;
        for (i++; i < n && is_digit(s[i]); i++) {
            uint64_t d = (uint64_t)(s[i] - '0');
            if (U64_OVF(sig, d)) { /* further digits are dropped */
                while (i < n && is_digit(s[i]))
                    i++;
                break;
            }
            sig = sig * 10 + d;
            exp--;
        }
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        int positive = 1;
        int32_t e = 0;
        is_float = 1;
        i++;
        if (s[i] == '+' || s[i] == '-')
            positive = s[i++] == '+';
        for (; i < n && is_digit(s[i]); i++) {
            int32_t d = s[i] - '0';
            if (I32_OVF(e, d)) /* 0 or -0 unless it grows a nonzero */
                return !(sig != 0 && positive);
            e = e * 10 + d;
        }
        exp = sat32(positive ? (int64_t)exp + e : (int64_t)exp - e);
    }
    return !is_float || finite_from_parts(sig, exp);
}

/* Consumes one number by the JSON grammar, refusing one that overflows a
 * double as the official reader does (number_in_range).  *is_uint says
 * whether it is a plain non-negative integer (no sign, fraction or
 * exponent). */
static int number_syntax(xj *j, int *is_uint)
{
    size_t at = j->pos;
    int plain = 1;
    if (xj_peek(j) == '-') {
        plain = 0;
        j->pos++;
    }
    if (xj_peek(j) == '0') {
        j->pos++;
        if (is_digit(xj_peek(j)))
            return xj_fail(j, XC_E_FORMAT_JSON, at,
                           "number with a leading zero");
    } else if (is_digit(xj_peek(j))) {
        while (is_digit(xj_peek(j)))
            j->pos++;
    } else {
        return xj_fail(j, XC_E_FORMAT_JSON, at, "malformed number");
    }
    if (xj_peek(j) == '.') {
        plain = 0;
        j->pos++;
        if (!is_digit(xj_peek(j)))
            return xj_fail(j, XC_E_FORMAT_JSON, at, "malformed number");
        while (is_digit(xj_peek(j)))
            j->pos++;
    }
    if (xj_peek(j) == 'e' || xj_peek(j) == 'E') {
        plain = 0;
        j->pos++;
        if (xj_peek(j) == '+' || xj_peek(j) == '-')
            j->pos++;
        if (!is_digit(xj_peek(j)))
            return xj_fail(j, XC_E_FORMAT_JSON, at, "malformed number");
        while (is_digit(xj_peek(j)))
            j->pos++;
    }
    if (!number_in_range(j->buf + at, j->pos - at))
        return xj_fail(j, XC_E_FORMAT_JSON, at, "number %.*s%s is out of "
                       "range (a double overflows)",
                       (int)(j->pos - at < 40 ? j->pos - at : 40),
                       j->buf + at, j->pos - at > 40 ? "..." : "");
    *is_uint = plain;
    return XC_OK;
}

int xj_uint(xj *j, uint64_t max, int type_code, const char *what,
            uint64_t *out)
{
    size_t at = j->pos;
    int c = xj_peek(j), plain, rc;
    uint64_t v = 0;
    /* Fast path: a plain integer in range, without a leading zero, ended
     * by a byte that cannot continue a number.  Anything else (leading
     * zero, fraction, exponent, a limit exceeded) goes the careful way
     * below from the same position, which gives it its exact report.  The
     * padding after len stops the digit scan. */
    if (c >= '1' && c <= '9') {
        /* Up to 19 digits cannot wrap 64 bits (10^19 - 1 < 2^64), and the
         * careful loop's per-digit test fails exactly when the value
         * exceeds max, so one compare at the end decides the same. */
        const char *b = j->buf;
        size_t k = at, stop = j->len - at > 19 ? at + 19 : j->len;
        while (k < stop && is_digit(b[k])) {
            v = v * 10 + (uint64_t)(b[k] - '0');
            k++;
        }
        if (v <= max &&
            (k >= j->len || (!is_digit(b[k]) && b[k] != '.' && b[k] != 'e' &&
                             b[k] != 'E'))) {
            j->pos = k;
            *out = v;
            return XC_OK;
        }
        v = 0;
    } else if (c == '0' && (j->len - at < 2 ||
                            (!is_digit(j->buf[at + 1]) &&
                             j->buf[at + 1] != '.' && j->buf[at + 1] != 'e' &&
                             j->buf[at + 1] != 'E'))) {
        j->pos = at + 1;
        *out = 0;
        return XC_OK;
    }
    if (c != '-' && !is_digit(c)) {
        /* Another type is type_code only if it is JSON at all. */
        xj probe = *j;
        if ((rc = xj_skip(&probe, 2)) != XC_OK)
            return rc;
        return xj_fail(j, type_code, at, "%s must be a non-negative integer, "
                       "found %s", what, describe(j));
    }
    if ((rc = number_syntax(j, &plain)) != XC_OK)
        return rc;
    if (!plain)
        return xj_fail(j, type_code, at, "%s must be a non-negative integer, "
                       "found %.*s", what, (int)(j->pos - at < 40
                                                 ? j->pos - at : 40),
                       j->buf + at);
    for (size_t k = at; k < j->pos; k++) {
        uint64_t d = (uint64_t)(j->buf[k] - '0');
        if (v > (max - d) / 10)
            return xj_fail(j, type_code, at, "%s %.*s exceeds the limit of "
                           "%llu", what, (int)(j->pos - at < 40
                                               ? j->pos - at : 40),
                           j->buf + at, (unsigned long long)max);
        v = v * 10 + d;
    }
    *out = v;
    return XC_OK;
}

/* ------------------------------------------------------------------ */
/* Any value                                                            */
/* ------------------------------------------------------------------ */

static int literal(xj *j, const char *word)
{
    size_t n = strlen(word);
    if (j->len - j->pos < n || memcmp(j->buf + j->pos, word, n) != 0)
        return xj_fail(j, XC_E_FORMAT_JSON, j->pos, "expected a JSON value");
    j->pos += n;
    return XC_OK;
}

int xj_skip(xj *j, int depth)
{
    int rc, c, plain;
    char *s;
    size_t n;
    xj_ws(j);
    c = xj_peek(j);
    switch (c) {
    case '"':
        return xj_string(j, &s, &n, NULL);
    case 't':
        return literal(j, "true");
    case 'f':
        return literal(j, "false");
    case 'n':
        return literal(j, "null");
    case '{':
    case '[':
        if (depth + 1 > XJ_MAX_DEPTH)
            return xj_fail(j, XC_E_FORMAT_JSON, j->pos,
                           "nesting deeper than %d levels", XJ_MAX_DEPTH);
        j->pos++;
        xj_ws(j);
        if (xj_peek(j) == (c == '{' ? '}' : ']')) {
            j->pos++;
            return XC_OK;
        }
        for (;;) {
            if (c == '{') {
                xj_ws(j);
                if ((rc = xj_string(j, &s, &n, NULL)) != XC_OK)
                    return rc;
                if ((rc = xj_expect(j, ':')) != XC_OK)
                    return rc;
            }
            if ((rc = xj_skip(j, depth + 1)) != XC_OK)
                return rc;
            xj_ws(j);
            if (xj_peek(j) == ',') {
                j->pos++;
                continue;
            }
            return xj_expect(j, c == '{' ? '}' : ']');
        }
    default:
        if (c == '-' || is_digit(c))
            return number_syntax(j, &plain);
        return xj_fail(j, XC_E_FORMAT_JSON, j->pos, "expected a JSON value, "
                       "found %s", describe(j));
    }
}
