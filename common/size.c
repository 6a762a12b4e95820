/* Sizes written by people (common/size.h). */
#include "common/size.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool parse_n(const char *s, size_t n, uint64_t *bytes)
{
    char buf[64];
    while (n && isspace((unsigned char)*s))
        s++, n--;
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = 0;
    if (!strcasecmp(buf, "none") || !strcasecmp(buf, "unlimited")) {
        *bytes = 0;
        return true;
    }
    /* Digits and at most one point, by hand: strtod would take "inf", "0x1p3" and signs. */
    uint64_t whole = 0;
    double frac = 0, scale = 0.1;
    const char *p = buf;
    if (!isdigit((unsigned char)*p))
        return false;
    for (; isdigit((unsigned char)*p); p++) {
        if (whole > (UINT64_MAX - 9) / 10)
            return false;
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return false;
        for (; isdigit((unsigned char)*p); p++, scale /= 10)
            frac += (*p - '0') * scale;
    }
    int shift = 0;
    switch (toupper((unsigned char)*p)) {
    case 0: break;
    case 'B': shift = 0, p++; break;
    case 'K': shift = 10, p++; break;
    case 'M': shift = 20, p++; break;
    case 'G': shift = 30, p++; break;
    case 'T': shift = 40, p++; break;
    default: return false;
    }
    if (shift && (*p == 'i' || *p == 'I'))
        p++;
    if (shift && (*p == 'b' || *p == 'B'))
        p++;
    if (*p)
        return false;
    if (whole >> (63 - shift))
        return false;
    *bytes = (whole << shift) + (uint64_t)(frac * (double)(1ull << shift));
    return true;
}

bool cumux_parse_size(const char *s, uint64_t *bytes)
{
    return s && parse_n(s, strlen(s), bytes);
}

bool cumux_device_entry(const char *s, int dev, char *out, size_t cap, bool (*valid)(const char *v))
{
    out[0] = 0;
    if (!s)
        return true;
    bool found = false;
    for (const char *p = s; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        const char *v = p;
        size_t vn = n;
        bool mine = !found; /* a bare entry: every device's, unless one names it */
        if (eq) {
            char *e;
            long d = strtol(p, &e, 10);
            if (e != eq || d < 0 || !(p[0] >= '0' && p[0] <= '9'))
                return false;
            v = eq + 1;
            vn = n - (size_t)(eq + 1 - p);
            mine = d == dev;
        }
        char one[64];
        if (vn == 0 || vn >= cap || vn >= sizeof one)
            return false;
        memcpy(one, v, vn);
        one[vn] = 0;
        if (valid && !valid(one))
            return false; /* whichever device it names */
        if (mine) {
            memcpy(out, one, vn + 1);
            found = found || eq;
        }
        p += n;
        if (*p == ',')
            p++;
    }
    return true;
}

static bool is_size(const char *v)
{
    uint64_t x;
    return parse_n(v, strlen(v), &x);
}

bool cumux_parse_device_limits(const char *s, int dev, uint64_t *bytes)
{
    char v[64];
    *bytes = 0;
    if (!cumux_device_entry(s, dev, v, sizeof v, is_size))
        return false;
    return !v[0] || parse_n(v, strlen(v), bytes);
}

bool cumux_parse_count(const char *s, uint32_t max, uint32_t *n)
{
    if (!s || !*s)
        return false;
    if (!strcmp(s, "none")) {
        *n = 0;
        return true;
    }
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9' || p - s > 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v > max)
        return false;
    *n = (uint32_t)v;
    return true;
}
