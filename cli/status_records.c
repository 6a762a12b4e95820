/* The server's status as records (CUMUX_STATUS_RECORDS in common/proto.h), for cumux control and
 * cumux top: GPU 0's worker's, then every other GPU's worker's, put together. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/proto.h"
#include "common/sock.h"

void cli_records_free(struct cumux_records *r)
{
    cumux_records_free(r);
}

/* GPU gpu's worker's records into r (merge: after GPU 0's); its status, as cli_request_gpu. */
static int records_of(int gpu, struct cumux_records *r, bool merge)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return -1;
    int st = cli_request_gpu(gpu, CUMUX_HELLO_STATUS, CUMUX_STATUS_RECORDS, 0, f);
    fclose(f);
    if (st == 0 && cumux_records_parse(text, r, merge) < 0)
        st = -1;
    free(text);
    return st;
}

int cli_records_get(struct cumux_records *r)
{
    memset(r, 0, sizeof *r);
    int st = records_of(0, r, false);
    if (st != 0) {
        if (!(st < 0 && errno == EPERM))
            fprintf(stderr, "cumux: no cumuxd runs on %s\n", cumux_pipe_directory());
        cumux_records_free(r);
        return -1;
    }
    /* A GPU whose worker does not answer (being replaced after a fault) is left out of this sample. */
    for (int g = 1; g < r->gpu_count && g < CUMUX_RECORD_MAX_GPUS; g++)
        records_of(g, r, true);
    return 0;
}
