/* Client priority classes (common/priority.h). */
#include "common/priority.h"

#include <string.h>

bool cumux_priority_parse(const char *s, enum cumux_priority *out)
{
    if (!s)
        return false;
    if (!strcmp(s, "high"))
        *out = CUMUX_PRIORITY_HIGH;
    else if (!strcmp(s, "normal") || !strcmp(s, "0"))
        *out = CUMUX_PRIORITY_NORMAL;
    else if (!strcmp(s, "low") || !strcmp(s, "1"))
        *out = CUMUX_PRIORITY_LOW;
    else
        return false;
    return true;
}

const char *cumux_priority_name(enum cumux_priority p)
{
    return p == CUMUX_PRIORITY_HIGH ? "high" : p == CUMUX_PRIORITY_LOW ? "low" : "normal";
}

int cumux_priority_stream(enum cumux_priority cls, int requested, int least, int greatest)
{
    if (greatest > least) /* a range given the wrong way round: no priorities */
        return least;
    if (requested > least)
        requested = least;
    if (requested < greatest)
        requested = greatest;
    int levels = least - greatest + 1;
    if (cls == CUMUX_PRIORITY_LOW)
        return least;
    if (levels < 3) /* too few levels for three bands: high gets the greatest, normal shares low's */
        return cls == CUMUX_PRIORITY_HIGH ? greatest : least;
    int top = levels / 3; /* levels of the high band */
    int band_greatest, band_least;
    if (cls == CUMUX_PRIORITY_HIGH)
        band_greatest = greatest, band_least = greatest + top - 1;
    else
        band_greatest = greatest + top, band_least = least - 1;
    /* The program's place in the device's range, kept in the band: its least maps to the band's least. */
    int span = least - greatest, band = band_least - band_greatest;
    return band_least - ((least - requested) * band + span / 2) / span;
}
