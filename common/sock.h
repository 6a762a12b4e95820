/* Unix-socket helpers: where the server listens, and messages that carry file descriptors. */
#ifndef CUMUX_SOCK_H
#define CUMUX_SOCK_H

#include <stddef.h>
#include <sys/types.h>

#define CUMUX_DEFAULT_PIPE_DIRECTORY "/tmp/cumux"
#define CUMUX_SOCKET_NAME "cumuxd.sock"

/* The pipe directory: $CUMUX_PIPE_DIRECTORY or /tmp/cumux. */
const char *cumux_pipe_directory(void);
/* Full socket path into buf; -1 when it does not fit in a sockaddr_un. */
int cumux_socket_path(char *buf, size_t len);

int cumux_sock_connect(const char *path);
int cumux_sock_listen(const char *path, int backlog);

/* Send len bytes, with fd attached when fd >= 0. Returns 0 or -1 (errno set). */
int cumux_sock_send(int sock, const void *buf, size_t len, int fd);
/* Receive exactly len bytes; a descriptor that came with them is stored in *fd (else -1).
 * Returns 0, or -1 on error or when the peer closed (errno ECONNRESET). */
int cumux_sock_recv(int sock, void *buf, size_t len, int *fd);

#endif
