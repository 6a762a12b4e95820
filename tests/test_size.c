/* Sizes as people and MPS write them (common/size.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/size.h"

static int failures;

static void want(const char *s, bool ok, uint64_t bytes)
{
    uint64_t v = 12345;
    bool r = cumux_parse_size(s, &v);
    if (r != ok || (ok && v != bytes)) {
        printf("FAIL size \"%s\": %s %llu, want %s %llu\n", s, r ? "ok" : "refused", (unsigned long long)v,
               ok ? "ok" : "refused", (unsigned long long)bytes);
        failures++;
    }
}

static void want_dev(const char *s, int dev, bool ok, uint64_t bytes)
{
    uint64_t v = 12345;
    bool r = cumux_parse_device_limits(s, dev, &v);
    if (r != ok || (ok && v != bytes)) {
        printf("FAIL limits \"%s\" device %d: %s %llu, want %s %llu\n", s, dev, r ? "ok" : "refused",
               (unsigned long long)v, ok ? "ok" : "refused", (unsigned long long)bytes);
        failures++;
    }
}

static void want_entry(const char *s, int dev, bool ok, const char *value)
{
    char v[64] = "junk";
    bool r = cumux_device_entry(s, dev, v, sizeof v, NULL);
    if (r != ok || (ok && strcmp(v, value) != 0)) {
        printf("FAIL entry \"%s\" device %d: %s \"%s\", want %s \"%s\"\n", s ? s : "(null)", dev, r ? "ok" : "refused", v,
               ok ? "ok" : "refused", value);
        failures++;
    }
}

static void want_count(const char *s, uint32_t max, bool ok, uint32_t n)
{
    uint32_t v = 12345;
    bool r = cumux_parse_count(s, max, &v);
    if (r != ok || (ok && v != n)) {
        printf("FAIL count \"%s\" (max %u): %s %u, want %s %u\n", s ? s : "(null)", max, r ? "ok" : "refused", v,
               ok ? "ok" : "refused", n);
        failures++;
    }
}

int main(void)
{
    want("4096", true, 4096);
    want("4G", true, 4ull << 30);
    want("4g", true, 4ull << 30);
    want("512M", true, 512ull << 20);
    want("512MB", true, 512ull << 20);
    want("512MiB", true, 512ull << 20);
    want("1.5G", true, 3ull << 29);
    want("64K", true, 65536);
    want("2T", true, 2ull << 40);
    want(" 8M ", true, 8ull << 20);
    want("100B", true, 100);
    want("none", true, 0);
    want("0", true, 0);
    want("", false, 0);
    want("G", false, 0);
    want("-1G", false, 0);
    want("1X", false, 0);
    want("1GG", false, 0);
    want("1.G", false, 0);
    want("inf", false, 0);
    want("0x10", false, 0);
    want("8589934592T", false, 0);            /* past 2^63 */
    want("99999999999999999999999", false, 0); /* past 2^64 */
    want(NULL, false, 0);
    want_dev("0=1G,1=512M", 0, true, 1ull << 30);
    want_dev("0=1G,1=512M", 1, true, 512ull << 20);
    want_dev("0=1G,1=512M", 2, true, 0);
    want_dev("2G", 3, true, 2ull << 30);
    want_dev("2G,1=1G", 1, true, 1ull << 30);
    want_dev("1=1G,2G", 1, true, 1ull << 30);
    want_dev("0=", 0, false, 0);
    want_dev("x=1G", 0, false, 0);
    want_dev("-1=1G", 0, false, 0);
    want_dev("0=1Q", 0, false, 0);
    want_dev(NULL, 0, true, 0);
    want_entry("16", 3, true, "16");
    want_entry("0=16,1=32", 1, true, "32");
    want_entry("0=16,1=32", 2, true, "");
    want_entry("8,1=32", 2, true, "8");
    want_entry("1=32,8", 1, true, "32");
    want_entry("0=50.5", 0, true, "50.5");
    want_entry("0=", 0, false, "");
    want_entry("=4", 0, false, "");
    want_entry("a=4", 0, false, "");
    want_entry("0=4,,1=2", 1, false, "");
    want_entry(NULL, 0, true, "");
    want_count("16", 4096, true, 16);
    want_count("none", 100, true, 0);
    want_count("0", 100, true, 0);
    want_count("100", 100, true, 100);
    want_count("101", 100, false, 0);
    want_count("-5", 100, false, 0);
    want_count("+5", 100, false, 0);
    want_count("5%", 100, false, 0);
    want_count("", 100, false, 0);
    want_count(NULL, 100, false, 0);
    want_count("99999999999999999999", 4096, false, 0);
    if (failures)
        return 1;
    printf("PASS size\n");
    return 0;
}
