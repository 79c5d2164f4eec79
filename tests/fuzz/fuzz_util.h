/* Shared helpers of the libFuzzer targets in tests/fuzz (built by scripts/fuzz.sh with clang,
 * -fsanitize=fuzzer,address,undefined): a private temporary folder per process (on /dev/shm
 * when it exists, so the library's fsyncs cost nothing), paths in it, and plain file writes.
 * Each target defines LLVMFuzzerTestOneInput and calls zt_fuzz_init() first. */
#ifndef ZT_FUZZ_UTIL_H
#define ZT_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Once per process: environment (no allocation cache, so ASan sees every buffer; one OpenMP
 * thread) and the temporary folder, removed at exit. */
void zt_fuzz_init(void);
/* dir/name in the temporary folder; 8 rotating buffers (copy a path to keep it longer). */
const char *zt_fuzz_path(const char *name);
/* Write data to path (truncating); aborts on an I/O error (that is the harness's fault). */
void zt_fuzz_write(const char *path, const void *data, size_t n);
/* Remove path and, if it is a folder, everything in it (no-op if missing). */
void zt_fuzz_remove(const char *path);
/* Stop with a message: an invariant of the parser under test does not hold. */
void zt_fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
