/* Reading whole files, safely, and checking a file a run will write: only regular files (a FIFO, a device or a folder is refused
 * before any read, so /dev/zero or a named pipe cannot hang or flood a reader), at most a
 * stated size, and for text files no NUL byte. The readers of every layer share these.
 * Included by: any layer (core and above) that reads a whole file or checks one it will write. */
#ifndef ZT_CORE_FILE_H
#define ZT_CORE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "zt/status.h"

/* Open path for reading (O_RDONLY | O_NONBLOCK | O_CLOEXEC, so a FIFO cannot block) and
 * refuse anything but a regular file, naming what it is (a folder, a FIFO, a device...).
 * what names the file's role in messages ("token file"). On success *fd is open (the caller
 * closes it) and *size is the file's size. */
ZT_NODISCARD zt_status zt__open_regular_file(const char *path, const char *what, int *fd, uint64_t *size);
/* Read a whole regular file of at most max_bytes bytes (larger ones are refused, naming the
 * limit) into a malloc'd buffer with a NUL after the last byte (text can be used as a C
 * string); the caller frees *data. Non-regular files are refused as above. */
ZT_NODISCARD zt_status zt__read_regular_file(const char *path, size_t max_bytes, const char *what, void **data, size_t *size);
/* zt__read_regular_file for text: the same checks, a UTF-8 byte-order mark refused as such, and
 * a NUL byte anywhere refused naming its line (a binary file, or a text file with a NUL, is not what the caller reads: the rest of
 * it would silently vanish from a C string). *text is NUL-terminated; the caller frees it. */
ZT_NODISCARD zt_status zt__read_text_file(const char *path, size_t max_bytes, const char *what, char **text, size_t *size);
/* A file that a run writes later (a figure at its end): its folder exists and can be written
 * into, and the path is not a folder or anything but a regular file. Nothing is created. what
 * names the file's role in messages. */
ZT_NODISCARD zt_status zt__check_output_file(const char *path, const char *what);

#endif
