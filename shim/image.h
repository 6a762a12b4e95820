/* Module images as the driver receives them: fatbin wrapper, fatbin, ELF cubin or PTX text. */
#ifndef CUMUX_SHIM_IMAGE_H
#define CUMUX_SHIM_IMAGE_H

#include <stddef.h>

/* Bytes of the image at `image`, and where they start (a wrapper points elsewhere); 0 when unknown. */
size_t cumux_image_size(const void *image, const void **start);

#endif
