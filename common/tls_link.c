/* The network link's security (common/tls_link.h), with GnuTLS: TLS 1.3 only, (EC)DHE-PSK key exchange. */
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/frame.h"
#include "common/tls_link.h"

#define KEY_MAX 64
#define IDENTITY_MAX 64

struct cumux_tls {
    gnutls_session_t session;
    gnutls_psk_client_credentials_t client_cred;
    gnutls_psk_server_credentials_t server_cred;
    int fd;
    char identity[IDENTITY_MAX + 1];
    unsigned char key[KEY_MAX];
    size_t key_len;
};

/* TLS 1.3 with a key exchange that gives forward secrecy; no certificate kinds, no plain PSK. AES-GCM
 * first: with the CPU's AES instructions it went 10x faster than ChaCha20-Poly1305, which GnuTLS's NORMAL
 * order chose here and which then took 44% of a copy's time across the link (docs/remote.md). */
static const char PRIORITY[] = "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK:+DHE-PSK"
                               ":-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305";

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int load_key(struct cumux_tls *t, const char *path, char *err, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(err, cap, "key file %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
        snprintf(err, cap, "key file %s: not a regular file of mode 0600 (others must not read it)", path);
        close(fd);
        return -1;
    }
    char line[IDENTITY_MAX + 2 * KEY_MAX + 8];
    ssize_t n = read(fd, line, sizeof line - 1);
    close(fd);
    if (n <= 0) {
        snprintf(err, cap, "key file %s: empty", path);
        return -1;
    }
    line[n] = 0;
    line[strcspn(line, "\n")] = 0;
    char *sp = strchr(line, ' ');
    size_t idl = sp ? (size_t)(sp - line) : 0, hl = sp ? strlen(sp + 1) : 0;
    bool ok = sp && idl >= 1 && idl <= IDENTITY_MAX && strspn(line, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == idl &&
              hl % 2 == 0 && hl >= 64 && hl <= 2 * KEY_MAX;
    for (size_t i = 0; ok && i < hl; i += 2) {
        int a = hexval(sp[1 + i]), b = hexval(sp[2 + i]);
        ok = a >= 0 && b >= 0;
        if (ok)
            t->key[i / 2] = (unsigned char)(a << 4 | b);
    }
    if (!ok) {
        snprintf(err, cap, "key file %s: not one line \"IDENTITY HEX\" (32 to 64 bytes of key in hex)", path);
        return -1;
    }
    memcpy(t->identity, line, idl);
    t->identity[idl] = 0;
    t->key_len = hl / 2;
    return 0;
}

static int server_key(gnutls_session_t s, const char *username, gnutls_datum_t *key)
{
    struct cumux_tls *t = gnutls_session_get_ptr(s);
    /* An unknown identity gets no key: the handshake fails as for a wrong key. */
    if (strcmp(username, t->identity) != 0)
        return -1;
    key->data = gnutls_malloc(t->key_len);
    if (!key->data)
        return -1;
    memcpy(key->data, t->key, t->key_len);
    key->size = (unsigned)t->key_len;
    return 0;
}

static void tls_free(struct cumux_tls *t)
{
    if (t->session)
        gnutls_deinit(t->session);
    if (t->client_cred)
        gnutls_psk_free_client_credentials(t->client_cred);
    if (t->server_cred)
        gnutls_psk_free_server_credentials(t->server_cred);
    explicit_bzero(t->key, sizeof t->key);
    free(t);
}

static struct cumux_tls *handshake(int fd, const char *key_file, bool server, char *err, size_t cap)
{
    struct cumux_tls *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, cap, "out of memory");
        return NULL;
    }
    t->fd = fd;
    int r = load_key(t, key_file, err, cap) == 0 ? GNUTLS_E_SUCCESS : -1;
    if (r == GNUTLS_E_SUCCESS)
        r = gnutls_init(&t->session, (server ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NO_SIGNAL);
    if (r == GNUTLS_E_SUCCESS)
        r = gnutls_priority_set_direct(t->session, PRIORITY, NULL);
    if (r == GNUTLS_E_SUCCESS && server) {
        r = gnutls_psk_allocate_server_credentials(&t->server_cred);
        if (r == GNUTLS_E_SUCCESS) {
            gnutls_psk_set_server_credentials_function(t->server_cred, server_key);
            r = gnutls_credentials_set(t->session, GNUTLS_CRD_PSK, t->server_cred);
        }
    } else if (r == GNUTLS_E_SUCCESS) {
        gnutls_datum_t key = {t->key, (unsigned)t->key_len};
        r = gnutls_psk_allocate_client_credentials(&t->client_cred);
        if (r == GNUTLS_E_SUCCESS)
            r = gnutls_psk_set_client_credentials(t->client_cred, t->identity, &key, GNUTLS_PSK_KEY_RAW);
        if (r == GNUTLS_E_SUCCESS)
            r = gnutls_credentials_set(t->session, GNUTLS_CRD_PSK, t->client_cred);
    }
    if (r == -1) {
        tls_free(t);
        return NULL;
    }
    if (r == GNUTLS_E_SUCCESS) {
        gnutls_session_set_ptr(t->session, t);
        gnutls_transport_set_int(t->session, fd);
        gnutls_handshake_set_timeout(t->session, 10000);
        do
            r = gnutls_handshake(t->session);
        while (r < 0 && !gnutls_error_is_fatal(r));
    }
    if (r < 0) {
        snprintf(err, cap, "TLS handshake: %s", gnutls_strerror(r));
        tls_free(t);
        return NULL;
    }
    return t;
}

struct cumux_tls *cumux_tls_client(int fd, const char *key_file, char *err, size_t cap)
{
    return handshake(fd, key_file, false, err, cap);
}

struct cumux_tls *cumux_tls_server(int fd, const char *key_file, char *err, size_t cap)
{
    return handshake(fd, key_file, true, err, cap);
}

int cumux_tls_send(struct cumux_tls *t, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = gnutls_record_send(t->session, p, n);
        if (w == GNUTLS_E_INTERRUPTED || w == GNUTLS_E_AGAIN)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int cumux_tls_send_frame(struct cumux_tls *t, uint32_t kind, const void *a, size_t al, const void *b, size_t bl)
{
    uint8_t h[CUMUX_FRAME_HEAD];
    if (al > CUMUX_FRAME_MAX || bl > CUMUX_FRAME_MAX - al)
        return -1;
    cumux_frame_head(h, kind, (uint32_t)(al + bl));
    return cumux_tls_send(t, h, sizeof h) == 0 && (!al || cumux_tls_send(t, a, al) == 0) &&
                   (!bl || cumux_tls_send(t, b, bl) == 0)
               ? 0
               : -1;
}

ssize_t cumux_tls_recv(struct cumux_tls *t, void *buf, size_t n)
{
    for (;;) {
        ssize_t r = gnutls_record_recv(t->session, buf, n);
        if (r == GNUTLS_E_INTERRUPTED || r == GNUTLS_E_AGAIN)
            continue;
        if (r == GNUTLS_E_PREMATURE_TERMINATION)
            return 0; /* the peer went without a close notify: its end all the same */
        return r < 0 ? -1 : r;
    }
}

int cumux_tls_fd(const struct cumux_tls *t)
{
    return t->fd;
}

void cumux_tls_close(struct cumux_tls *t)
{
    if (!t)
        return;
    gnutls_bye(t->session, GNUTLS_SHUT_WR);
    close(t->fd);
    tls_free(t);
}

int cumux_tls_make_key(const char *path, const char *identity)
{
    unsigned char key[32];
    if (strlen(identity) > IDENTITY_MAX || !*identity ||
        strspn(identity, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(identity)) {
        errno = EINVAL;
        return -1;
    }
    if (gnutls_rnd(GNUTLS_RND_KEY, key, sizeof key) != 0) {
        errno = EIO;
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    char line[IDENTITY_MAX + 2 * sizeof key + 4];
    int n = snprintf(line, sizeof line, "%s ", identity);
    for (size_t i = 0; i < sizeof key; i++)
        n += snprintf(line + n, sizeof line - (size_t)n, "%02x", key[i]);
    line[n++] = '\n';
    explicit_bzero(key, sizeof key);
    int rc = write(fd, line, (size_t)n) == n ? 0 : -1;
    explicit_bzero(line, sizeof line);
    if (close(fd) != 0)
        rc = -1;
    return rc;
}
