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

bool cumux_parse_device_limits(const char *s, int dev, uint64_t *bytes)
{
    *bytes = 0;
    if (!s)
        return true;
    bool found = false;
    for (const char *p = s; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        uint64_t v;
        if (!eq) {
            if (!parse_n(p, n, &v))
                return false;
            if (!found)
                *bytes = v;
        } else {
            char *e;
            long d = strtol(p, &e, 10);
            if (e != eq || d < 0 || !parse_n(eq + 1, n - (size_t)(eq + 1 - p), &v))
                return false;
            if (d == dev)
                *bytes = v, found = true;
        }
        p += n;
        if (*p == ',')
            p++;
    }
    return true;
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
