/* The network link's security (issue 45, docs/remote.md): TLS 1.3 (GnuTLS) over a connected socket,
 * authenticated both ways by a pre-shared key with (EC)DHE, so that only a peer holding the server's key
 * file connects, nothing on the wire is readable, and a recorded session stays unreadable should the key
 * leak later (forward secrecy). The key file: one line "IDENTITY HEX" (an identity of letters, digits and
 * ._- ; 32 to 64 bytes of key in hex), mode 0600 or stricter, or it is refused. */
#ifndef CUMUX_TLS_LINK_H
#define CUMUX_TLS_LINK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cumux_tls;

/* The handshake on fd as the client or the server, with the key file's key; NULL (err says why) when it
 * fails: a wrong key, a peer speaking no TLS, a file that is not a key file. The link owns fd after. */
struct cumux_tls *cumux_tls_client(int fd, const char *key_file, char *err, size_t cap);
struct cumux_tls *cumux_tls_server(int fd, const char *key_file, char *err, size_t cap);
/* All n bytes: 0, or -1 (the link is broken). */
int cumux_tls_send(struct cumux_tls *t, const void *buf, size_t n);
/* A frame (common/frame.h) of kind whose payload is a (al bytes) then b (bl bytes): 0, or -1 (broken, or
 * past CUMUX_FRAME_MAX). */
int cumux_tls_send_frame(struct cumux_tls *t, uint32_t kind, const void *a, size_t al, const void *b, size_t bl);
/* Some bytes (at most n): how many, 0 at the peer's end, -1 when broken. */
ssize_t cumux_tls_recv(struct cumux_tls *t, void *buf, size_t n);
int cumux_tls_fd(const struct cumux_tls *t);
void cumux_tls_close(struct cumux_tls *t);
/* A new key file at path (mode 0600): identity and 32 random bytes. 0, or -1 with errno. */
int cumux_tls_make_key(const char *path, const char *identity);

#endif
