/* The CUDA runtime's integrity check of the driver: HMAC-MD2 over facts both can see. */
#ifndef CUMUX_SHIM_INTEGRITY_H
#define CUMUX_SHIM_INTEGRITY_H

#include <stddef.h>
#include <stdint.h>

void cumux_md2(const uint8_t *data, size_t len, uint8_t digest[16]);
/* RFC 2104 HMAC with MD2 (block size 16): the key is used as is when it is 16 bytes. */
void cumux_hmac_md2(const uint8_t *key, size_t key_len, const uint8_t *data, size_t len, uint8_t mac[16]);

struct cumux_integrity_device {
    uint8_t uuid[16];
    int32_t pci_domain, pci_bus, pci_device;
};

/* The answer of the INTEGRITY_CHECK table's slot 1 for these facts (see docs/export-tables.md). */
void cumux_integrity_answer(uint32_t driver_version, uint32_t version, uint32_t pid, uint32_t tid,
                            const void *cudart_table, const void *integrity_table, const void *integrity_fn,
                            uint64_t unix_seconds, const struct cumux_integrity_device *devs, int ndevs,
                            uint64_t out[2]);

#endif
