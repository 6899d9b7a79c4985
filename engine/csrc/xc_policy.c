/*
 * xc_policy.c -- the policy table and the spec parser.
 *
 * A spec is "name" or "name:key=value,key=value" with unsigned decimal
 * values.  Everything about a policy except its parameter names lives in its
 * own file; this file only finds it by name and fills its parameters.
 */
#include "xc_internal.h"
#include "xc_policy.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The policy table, filled by the policy files' XC_POLICY_REGISTER lines
 * (xc_policy.h) when the library is loaded, kept in (rank, name) order:
 * the order xc_policy_name lists them in and the "valid:" message shows.
 * Adding a policy is its file; nothing here changes. */
static const xc_policy_ops *table[XC_POLICY_SLOTS];
static int rank_of[XC_POLICY_SLOTS];
static size_t n_table;
#define N_POLICIES n_table

/* Adds ops at its place by (rank, name).  Runs from the policy files'
 * constructors, one at a time, before the library's functions can be
 * called; a second registration of a name or one past XC_POLICY_SLOTS is a
 * programming error (asserted; dropped when asserts are compiled out). */
void xc_policy_register(const xc_policy_ops *ops, int rank)
{
    size_t i;
    assert(ops != NULL && ops->name != NULL);
    assert(n_table < XC_POLICY_SLOTS);
    for (i = 0; i < n_table; i++) {
        assert(strcmp(table[i]->name, ops->name) != 0);
        if (strcmp(table[i]->name, ops->name) == 0)
            return;
    }
    if (n_table == XC_POLICY_SLOTS)
        return;
    for (i = n_table; i > 0 && (rank_of[i - 1] > rank ||
                                (rank_of[i - 1] == rank &&
                                 strcmp(table[i - 1]->name, ops->name) > 0));
         i--) {
        table[i] = table[i - 1];
        rank_of[i] = rank_of[i - 1];
    }
    table[i] = ops;
    rank_of[i] = rank;
    n_table++;
}

/* ------------------------------------------------------------------ */
/* The table, as xc.h exposes it                                        */
/* ------------------------------------------------------------------ */

int xc_policy_count(void) { return (int)N_POLICIES; }

const char *xc_policy_name(int i)
{
    return i >= 0 && (size_t)i < N_POLICIES ? table[i]->name : NULL;
}

/* Parameter j of policy i, or NULL (param_names is NULL-terminated when
 * shorter than XC_POLICY_MAX_PARAMS). */
static const char *param_name(int i, int j)
{
    if (i < 0 || (size_t)i >= N_POLICIES || j < 0 ||
        j >= XC_POLICY_MAX_PARAMS)
        return NULL;
    for (int k = 0; k < j; k++)
        if (table[i]->param_names[k] == NULL)
            return NULL;
    return table[i]->param_names[j];
}

const char *xc_policy_param_name(int i, int j) { return param_name(i, j); }

uint64_t xc_policy_param_default(int i, int j)
{
    return param_name(i, j) != NULL ? table[i]->param_default[j] : 0;
}

/* Appends s to buf (capacity cap, always NUL-terminated), cutting it short
 * when full. */
static void append(char *buf, size_t cap, const char *s)
{
    size_t used = strlen(buf);
    if (used + 1 < cap)
        strncat(buf, s, cap - used - 1);
}

/* Every policy of the table as a spec template, in table order:
 * "lru, fifo, lfu, lfru:sample=N,seed=N, ...". */
static void valid_specs(char *buf, size_t cap)
{
    size_t i, j;
    buf[0] = '\0';
    for (i = 0; i < N_POLICIES; i++) {
        if (i)
            append(buf, cap, ", ");
        append(buf, cap, table[i]->name);
        for (j = 0; j < XC_POLICY_MAX_PARAMS && table[i]->param_names[j]; j++) {
            append(buf, cap, j ? "," : ":");
            append(buf, cap, table[i]->param_names[j]);
            append(buf, cap, "=N");
        }
    }
}

static int bad_name(const char *spec, size_t len)
{
    char valid[512];
    valid_specs(valid, sizeof valid);
    return xc_fail(XC_E_MISUSE, -1, -1, -1, "unknown policy '%.*s'; valid: %s",
                   (int)len, spec, valid);
}

static int bad_param(const xc_policy_ops *ops, const char *what, size_t len)
{
    char valid[128] = "";
    size_t i;
    for (i = 0; i < XC_POLICY_MAX_PARAMS && ops->param_names[i]; i++) {
        if (i)
            strncat(valid, ", ", sizeof valid - strlen(valid) - 1);
        strncat(valid, ops->param_names[i], sizeof valid - strlen(valid) - 1);
    }
    return xc_fail(XC_E_MISUSE, -1, -1, -1,
                   "policy %s: bad parameter '%.*s'; valid parameters: %s "
                   "(as key=unsigned integer)",
                   ops->name, (int)len, what, i ? valid : "none");
}

/* Parses one "key=value" of length len into p->param. */
static int parse_param(xc_policy *p, const char *s, size_t len)
{
    const xc_policy_ops *ops = p->ops;
    const char *eq = memchr(s, '=', len);
    size_t i, klen;
    char num[32], *end;
    unsigned long long v;
    if (eq == NULL)
        return bad_param(ops, s, len);
    klen = (size_t)(eq - s);
    for (i = 0; i < XC_POLICY_MAX_PARAMS && ops->param_names[i]; i++)
        if (strlen(ops->param_names[i]) == klen &&
            memcmp(ops->param_names[i], s, klen) == 0)
            break;
    if (i == XC_POLICY_MAX_PARAMS || ops->param_names[i] == NULL)
        return bad_param(ops, s, len);
    if (len - klen - 1 == 0 || len - klen - 1 >= sizeof num ||
        eq[1] < '0' || eq[1] > '9')
        return bad_param(ops, s, len);
    memcpy(num, eq + 1, len - klen - 1);
    num[len - klen - 1] = '\0';
    errno = 0;
    v = strtoull(num, &end, 10);
    if (errno || *end != '\0')
        return bad_param(ops, s, len);
    p->param[i] = v;
    return XC_OK;
}

int xc_policy_open(xc_policy *p, const char *spec, uint32_t n_keys,
                   size_t n_slots)
{
    const char *colon;
    size_t name_len, i;
    int rc;
    memset(p, 0, sizeof *p);
    if (spec == NULL || *spec == '\0')
        spec = "lru";
    colon = strchr(spec, ':');
    name_len = colon ? (size_t)(colon - spec) : strlen(spec);
    for (i = 0; i < N_POLICIES; i++)
        if (strlen(table[i]->name) == name_len &&
            memcmp(table[i]->name, spec, name_len) == 0)
            break;
    if (i == N_POLICIES)
        return bad_name(spec, name_len);
    p->ops = table[i];
    p->n_keys = n_keys;
    p->n_slots = n_slots ? n_slots : 1;
    memcpy(p->param, p->ops->param_default, sizeof p->param);
    if (colon) {
        const char *s = colon + 1;
        for (;;) {
            const char *comma = strchr(s, ',');
            size_t len = comma ? (size_t)(comma - s) : strlen(s);
            if ((rc = parse_param(p, s, len)) != XC_OK) {
                memset(p, 0, sizeof *p);
                return rc;
            }
            if (!comma)
                break;
            s = comma + 1;
        }
    }
    if ((rc = p->ops->init(p)) != XC_OK) {
        memset(p, 0, sizeof *p);
        return rc;
    }
    return XC_OK;
}

void xc_policy_close(xc_policy *p)
{
    if (p->ops)
        p->ops->fini(p);
    memset(p, 0, sizeof *p);
}
