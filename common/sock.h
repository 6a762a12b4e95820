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
/* Each GPU has a worker of its own (its fault domain), listening on a socket of its own: GPU 0's is
 * CUMUX_SOCKET_NAME (also where status, control and stop go), GPU k's "cumuxd-gpu<k>.sock"; the worker's
 * pid is in "cumuxd-gpu.pid" for GPU 0, "cumuxd-gpu<k>.pid" for GPU k. Names, then full paths (-1: too
 * long, or gpu out of range). */
int cumux_gpu_socket_name(int gpu, char *buf, size_t len);
int cumux_gpu_pid_name(int gpu, char *buf, size_t len);
int cumux_gpu_socket_path(int gpu, char *buf, size_t len);

int cumux_sock_connect(const char *path);
int cumux_sock_listen(const char *path, int backlog);

/* Send len bytes, with fd attached when fd >= 0. Returns 0 or -1 (errno set). */
int cumux_sock_send(int sock, const void *buf, size_t len, int fd);
/* The same, never waiting for room: -1 when the peer's socket is full (a peer that does not read). */
int cumux_sock_send_now(int sock, const void *buf, size_t len, int fd);
/* Receive exactly len bytes; a descriptor that came with them is stored in *fd (else -1).
 * Returns 0, or -1 on error or when the peer closed (errno ECONNRESET). */
int cumux_sock_recv(int sock, void *buf, size_t len, int *fd);
/* One non-blocking read of at most len bytes (descriptors as cumux_sock_recv; extras closed). Returns the
 * bytes read, 0 when the peer closed, -1 on error (EAGAIN: nothing there yet). */
ssize_t cumux_sock_recv_some(int sock, void *buf, size_t len, int *fd);

/* Who is the server: every client checks, before it sends anything (its hello may carry its stdout),
 * that the pipe directory is a real directory (not a link) of its own user or root, closed to others'
 * writes, and that the process listening runs as its own uid or root. Another user who made the pipe
 * directory first could otherwise stand in for cumuxd.
 * cumux_check_pipe_dir: 0, or -1 (errno ENOENT... when missing, EPERM when someone else's) with why in err.
 * cumux_check_peer: the listener's credentials (SO_PEERCRED) on a connected socket; 0, or -1 (EPERM).
 * cumux_connect_checked: both around a connect; the socket, or -1 with errno (EPERM: another user's
 * process holds the pipe directory; ENOENT, ECONNREFUSED: no server) and the reason in err. */
int cumux_check_pipe_dir(const char *dir, char *err, size_t errlen);
int cumux_check_peer(int sock, const char *path, char *err, size_t errlen);
int cumux_connect_checked(const char *path, char *err, size_t errlen);

#endif
