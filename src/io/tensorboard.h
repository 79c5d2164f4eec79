/* TensorBoard event files (src/io/tensorboard.c): the writer behind `zt train
 * --tensorboard DIR`. Internal (zt__ prefix); the training loop owns one writer on rank 0.
 *
 * Format. An event file is a sequence of records: u64 length (little-endian), u32 masked
 * CRC-32C of those 8 bytes, the data (one serialized tensorboard.Event protobuf), u32
 * masked CRC-32C of the data; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. Fields
 * written (numbers checked against tensorboard's event.proto and summary.proto):
 *   Event      wall_time 1 (double), step 2 (int64), file_version 3 (string),
 *              summary 5 (Summary), session_log 7 (SessionLog)
 *   Summary    value 1 (repeated Value)
 *   Value      tag 1 (string), simple_value 2 (float)
 *   SessionLog status 1 (enum; START = 1)
 * Values are stored as float32 (TensorBoard's simple_value): byte counts keep about 7
 * significant digits.
 *
 * A file holds, in order: the file_version record ("brain.Event:2"), a SessionLog START at
 * step resume_step + 1 (the first step this file will log), then the events. The START
 * makes TensorBoard's Python loaders drop the events of older files in the folder whose
 * step is >= that step: after a resume, the steps a killed run logged past its checkpoint
 * are replaced by the new run's. (plugin_event_accumulator ignores the first START of a
 * run and purges on later ones, which is why every file, a fresh run's too, carries one;
 * the Rust data server ignores SessionLog and instead drops, per tag, the points whose
 * step is >= a newly read one, which gives the same result.) All loaders read a folder's
 * files in name order: file names are chosen so that a new file sorts after every event
 * file already in the folder (see zt__tb_open).
 *
 * Tags the training run writes (zt__tb_write_step, src/train/run_log.c; one Event per step, at
 * step = in->step):
 *   train/loss          training loss
 *   train/lr            learning rate
 *   train/grad_norm     global gradient norm (before clipping)
 *   train/loss_scale    f16 loss scale (only when loss_scale > 0)
 *   val/loss            validation loss (only at steps that evaluated: val_loss not NaN)
 *   perf/tokens_per_s   training tokens per second
 *   perf/mfu            model FLOP utilisation (fraction of the measured sgemm ceiling)
 *   perf/step_ms        wall time of the step in milliseconds
 *   mem/<TAG>           current bytes of each allocator tag on cpu (<TAG> from
 *                       zt_mem_tag_name: PARAM, GRAD, OPTIM, ACTIVATION, COMM, TEMP)
 *   mem/total           current bytes, all tags
 *   mem_peak/<TAG>      peak bytes of each tag
 *   mem_peak/total      peak of the sum of all tags (not the sum of peaks)
 *   mem_peak/rss        the process's peak resident set size, bytes
 * They are the figures of the --metrics JSON lines, under the keys loss, lr, grad_norm,
 * loss_scale, val_loss, tokens_per_s, mfu, step_ms, mem.<TAG>.current, mem.total.current,
 * mem.<TAG>.peak, mem.total.peak and peak_rss (scripts/check_tensorboard.py compares them).
 *
 * Errors: every I/O failure returns ZT_STATUS_IO naming the file and what to do; after a
 * failed write the writer refuses further writes (the file may end in a partial record,
 * which TensorBoard's readers treat as a truncated file and skip).
 * Included by: src/io and src/train (the run's logs) and tests. */
#ifndef ZT_TRAIN_TENSORBOARD_H
#define ZT_TRAIN_TENSORBOARD_H

#include "zt/io.h"

/* CRC-32C (Castagnoli: reflected, polynomial 0x82F63B78, initial and final xor
 * 0xFFFFFFFF). zt__crc32c_extend continues a CRC over more bytes:
 * extend(crc32c(a), b) == crc32c(a || b); zt__crc32c(p, n) == extend(0, p, n). */
uint32_t zt__crc32c(const void *data, size_t n);
uint32_t zt__crc32c_extend(uint32_t crc, const void *data, size_t n);
/* The masked form stored in event-file records (a CRC over data that contains CRCs
 * would otherwise be weak). */
uint32_t zt__crc32c_mask(uint32_t crc);

typedef struct zt__tb zt__tb;

/* Creates dir if missing (one level: its parent must exist; an error names a missing
 * parent, or dir being a file), then a new file dir/events.out.tfevents.<unix seconds>.
 * <hostname>.<pid>. The seconds are the later of now and one past the newest
 * events.out.tfevents.* file already in dir, so the new file sorts after them (TensorBoard
 * reads a folder's files in name order) and its name is new even when two writers start
 * in the same second; the file is created exclusively (O_EXCL), moving on a second when a
 * concurrent writer took the name. Writes the file_version record and a SessionLog START
 * at step resume_step + 1, and flushes. resume_step: the steps already completed (a
 * resumed run's checkpoint step; 0 for a fresh run). *out is owned by the caller
 * (zt__tb_close). */
ZT_NODISCARD zt_status zt__tb_open(const char *dir, int64_t resume_step, zt__tb **out);
/* The path of the file being written (owned by w). */
const char *zt__tb_path(const zt__tb *w);
/* One Event with one Value (tag: non-empty UTF-8, at most 1024 bytes) at step. Buffered:
 * zt__tb_flush (or the next zt__tb_write_step) pushes it to the file. */
ZT_NODISCARD zt_status zt__tb_scalar(zt__tb *w, const char *tag, int64_t step, double value);
/* One Event at step holding n Values (the tags as zt__tb_scalar takes them), then a flush. */
ZT_NODISCARD zt_status zt__tb_scalars(zt__tb *w, int64_t step, int n, const char *const *tags, const double *values);
/* fflush (not fsync): the events reach the OS, where TensorBoard can read them. */
ZT_NODISCARD zt_status zt__tb_flush(zt__tb *w);
/* Flushes, closes and frees w (NULL: nothing, ZT_OK). w is freed even when the final
 * flush fails (the status says so). */
ZT_NODISCARD zt_status zt__tb_close(zt__tb *w);

#endif
