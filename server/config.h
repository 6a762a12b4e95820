/* cumuxd's settings file (server/config.c). */
#ifndef CUMUX_SERVER_CONFIG_H
#define CUMUX_SERVER_CONFIG_H

#include <stdbool.h>

/* At start, before anything reads the environment: the file's settings (path NULL: none) into it, then
 * the live settings (default memory limit, priority, thread percentage) from it. false: said on stderr. */
bool srv_config_start(const char *path);
/* The supervisor, on SIGHUP: the file again; the live settings applied, the outcome logged and left in
 * the supervisor's page for `cumux reload`. */
void srv_config_reload(void);

#endif
