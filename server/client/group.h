/* A client's group (groups.c): its cgroup, read once when it connected, and its group's count here. */
#ifndef CUMUX_SERVER_CLIENT_GROUP_H
#define CUMUX_SERVER_CLIENT_GROUP_H

#include "common/proto.h"

struct srv_group;

struct srv_client_group {
    char cgroup[CUMUX_GROUP_PATH]; /* written before the client is listed, then only read */
    struct srv_group *group;       /* under groups.c's lock; NULL: in no group that has settings */
    uint32_t seen_version;         /* under that lock: the rules' version its group was found in */
};

#endif
