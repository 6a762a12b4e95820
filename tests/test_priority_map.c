/* Client priority classes and the stream priorities the server gives them (common/priority.c). */
#include <stdio.h>

#include "common/priority.h"

static int failures;

static void want(enum cumux_priority cls, int requested, int least, int greatest, int expected)
{
    int got = cumux_priority_stream(cls, requested, least, greatest);
    if (got != expected) {
        printf("FAIL %s client, stream priority %d, range %d..%d: %d, want %d\n", cumux_priority_name(cls),
               requested, least, greatest, got, expected);
        failures++;
    }
}

int main(void)
{
    /* The H200's range, 0 (least) .. -5 (greatest): low {0}, normal {-1..-3}, high {-4, -5}. */
    want(CUMUX_PRIORITY_LOW, 0, 0, -5, 0);
    want(CUMUX_PRIORITY_LOW, -5, 0, -5, 0);
    want(CUMUX_PRIORITY_NORMAL, 0, 0, -5, -1);
    want(CUMUX_PRIORITY_NORMAL, -5, 0, -5, -3);
    want(CUMUX_PRIORITY_NORMAL, -3, 0, -5, -2);
    want(CUMUX_PRIORITY_HIGH, 0, 0, -5, -4);
    want(CUMUX_PRIORITY_HIGH, -5, 0, -5, -5);
    /* Out of range requests are clamped first, as the driver clamps. */
    want(CUMUX_PRIORITY_NORMAL, 7, 0, -5, -1);
    want(CUMUX_PRIORITY_HIGH, -99, 0, -5, -5);
    /* Every class strictly ordered, whatever the program asks, on ranges of 3 to 8 levels. */
    for (int g = -2; g >= -7; g--)
        for (int a = 0; a >= g; a--)
            for (int b = 0; b >= g; b--) {
                int hi = cumux_priority_stream(CUMUX_PRIORITY_HIGH, a, 0, g);
                int no = cumux_priority_stream(CUMUX_PRIORITY_NORMAL, b, 0, g);
                int lo = cumux_priority_stream(CUMUX_PRIORITY_LOW, a, 0, g);
                if (!(hi < no && no < lo) || hi < g || lo > 0) {
                    printf("FAIL range 0..%d: high(%d) %d, normal(%d) %d, low %d not strictly ordered\n", g, a, hi,
                           b, no, lo);
                    failures++;
                }
                /* Inside a class a program's own order holds (not strictly: bands are narrower). */
                if (a < b && cumux_priority_stream(CUMUX_PRIORITY_NORMAL, a, 0, g) >
                                 cumux_priority_stream(CUMUX_PRIORITY_NORMAL, b, 0, g)) {
                    printf("FAIL range 0..%d: normal %d above %d turned round\n", g, a, b);
                    failures++;
                }
            }
    /* Two levels: high above the rest; one level: all the same. */
    want(CUMUX_PRIORITY_HIGH, 0, 0, -1, -1);
    want(CUMUX_PRIORITY_NORMAL, -1, 0, -1, 0);
    want(CUMUX_PRIORITY_HIGH, 0, 0, 0, 0);
    enum cumux_priority p;
    if (!cumux_priority_parse("high", &p) || p != CUMUX_PRIORITY_HIGH || !cumux_priority_parse("1", &p) ||
        p != CUMUX_PRIORITY_LOW || !cumux_priority_parse("0", &p) || p != CUMUX_PRIORITY_NORMAL ||
        cumux_priority_parse("2", &p) || cumux_priority_parse("urgent", &p) || cumux_priority_parse(NULL, &p)) {
        printf("FAIL cumux_priority_parse\n");
        failures++;
    }
    if (failures)
        return 1;
    printf("PASS priority_map\n");
    return 0;
}
