/* TensorBoard event files: records of serialized tensorboard.Event protobufs framed with
 * masked CRC-32C (the format is described in tensorboard.h). The writer owns one FILE;
 * encoding buffers are kept in the writer and reused, so a step allocates nothing once
 * they have grown. After a failed write the writer is broken and refuses further writes. */
#include "core/status_internal.h"
#include "io/tensorboard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ CRC-32C */

/* Byte-at-a-time table of the reflected Castagnoli polynomial 0x82F63B78:
 * table[i] = i shifted right through 8 steps of the polynomial division. */
static const uint32_t crc32c_table[256] = {
    0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4, 0xc79a971f, 0x35f1141c,
    0x26a1e7e8, 0xd4ca64eb, 0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b,
    0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24, 0x105ec76f, 0xe235446c,
    0xf165b798, 0x030e349b, 0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
    0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54, 0x5d1d08bf, 0xaf768bbc,
    0xbc267848, 0x4e4dfb4b, 0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a,
    0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35, 0xaa64d611, 0x580f5512,
    0x4b5fa6e6, 0xb93425e5, 0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
    0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45, 0xf779deae, 0x05125dad,
    0x1642ae59, 0xe4292d5a, 0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a,
    0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595, 0x417b1dbc, 0xb3109ebf,
    0xa0406d4b, 0x522bee48, 0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
    0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687, 0x0c38d26c, 0xfe53516f,
    0xed03a29b, 0x1f682198, 0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927,
    0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38, 0xdbfc821c, 0x2997011f,
    0x3ac7f2eb, 0xc8ac71e8, 0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
    0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096, 0xa65c047d, 0x5437877e,
    0x4767748a, 0xb50cf789, 0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859,
    0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46, 0x7198540d, 0x83f3d70e,
    0x90a324fa, 0x62c8a7f9, 0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
    0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36, 0x3cdb9bdd, 0xceb018de,
    0xdde0eb2a, 0x2f8b6829, 0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c,
    0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93, 0x082f63b7, 0xfa44e0b4,
    0xe9141340, 0x1b7f9043, 0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
    0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3, 0x55326b08, 0xa759e80b,
    0xb4091bff, 0x466298fc, 0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c,
    0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033, 0xa24bb5a6, 0x502036a5,
    0x4370c551, 0xb11b4652, 0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
    0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d, 0xef087a76, 0x1d63f975,
    0x0e330a81, 0xfc588982, 0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d,
    0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622, 0x38cc2a06, 0xcaa7a905,
    0xd9f75af1, 0x2b9cd9f2, 0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
    0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530, 0x0417b1db, 0xf67c32d8,
    0xe52cc12c, 0x1747422f, 0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff,
    0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0, 0xd3d3e1ab, 0x21b862a8,
    0x32e8915c, 0xc083125f, 0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
    0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90, 0x9e902e7b, 0x6cfbad78,
    0x7fab5e8c, 0x8dc0dd8f, 0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee,
    0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1, 0x69e9f0d5, 0x9b8273d6,
    0x88d28022, 0x7ab90321, 0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
    0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81, 0x34f4f86a, 0xc69f7b69,
    0xd5cf889d, 0x27a40b9e, 0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e,
    0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
};

uint32_t zt__crc32c_extend(uint32_t crc, const void *data, size_t n) {
  const uint8_t *p = data;
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; i++) c = crc32c_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t zt__crc32c(const void *data, size_t n) { return zt__crc32c_extend(0, data, n); }

uint32_t zt__crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ------------------------------------------------------------------ protobuf encoding */

typedef struct pbuf {
  uint8_t *p;
  size_t n, cap;
  bool oom;
} pbuf;

static void pb_put(pbuf *b, const void *src, size_t n) {
  if (b->oom) return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n) cap *= 2;
    uint8_t *np = realloc(b->p, cap);
    if (!np) {
      b->oom = true;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, n++;
  return n;
}

static void pb_varint(pbuf *b, uint64_t v) {
  uint8_t t[10];
  size_t n = 0;
  while (v >= 0x80) {
    t[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  t[n++] = (uint8_t)v;
  pb_put(b, t, n);
}

/* Wire types: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit. */
enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };
static void pb_key(pbuf *b, unsigned field, unsigned wire) { pb_varint(b, (uint64_t)(field << 3 | wire)); }

static void le_bytes(uint8_t *out, uint64_t v, int n) {
  for (int i = 0; i < n; i++) out[i] = (uint8_t)(v >> (8 * i));
}

static void pb_double(pbuf *b, unsigned field, double v) {
  uint64_t bits;
  memcpy(&bits, &v, 8);
  uint8_t t[8];
  le_bytes(t, bits, 8);
  pb_key(b, field, WIRE_I64);
  pb_put(b, t, 8);
}

static void pb_float(pbuf *b, unsigned field, float v) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  uint8_t t[4];
  le_bytes(t, bits, 4);
  pb_key(b, field, WIRE_I32);
  pb_put(b, t, 4);
}

static void pb_bytes(pbuf *b, unsigned field, const void *p, size_t n) {
  pb_key(b, field, WIRE_LEN);
  pb_varint(b, n);
  pb_put(b, p, n);
}

/* Field numbers of tensorboard's event.proto and summary.proto. */
enum {
  EVENT_WALL_TIME = 1,
  EVENT_STEP = 2,
  EVENT_FILE_VERSION = 3,
  EVENT_SUMMARY = 5,
  EVENT_SESSION_LOG = 7,
  SUMMARY_VALUE = 1,
  VALUE_TAG = 1,
  VALUE_SIMPLE_VALUE = 2,
  SESSION_LOG_STATUS = 1,
  SESSION_LOG_START = 1
};

#define TB_TAG_MAX 1024

/* ------------------------------------------------------------------ the writer */

struct zt__tb {
  FILE *f;
  char *path;
  pbuf summary, event; /* reused encoding buffers */
  bool broken;                 /* a write failed: refuse further writes */
};

const char *zt__tb_path(const zt__tb *w) { return w ? w->path : ""; }

static double wall_time_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static zt_status write_failed(zt__tb *w, int err) {
  w->broken = true;
  return ZT_ERR(ZT_STATUS_IO,
                "cannot write TensorBoard events to '%s': %s (check the free space and permissions of its folder; "
                "the file may end in a partial record, which TensorBoard skips)",
                w->path, strerror(err));
}

static zt_status check_usable(const zt__tb *w, const char *fn) {
  if (!w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the writer is NULL", fn);
  if (w->broken)
    return ZT_ERR(ZT_STATUS_IO,
                  "%s: an earlier write to '%s' failed, so this writer takes no more events (close it; open a new "
                  "one to go on in a new file)",
                  fn, w->path);
  return ZT_OK;
}

/* Frame w->event as one record and hand it to the FILE (buffered). */
static zt_status write_record(zt__tb *w) {
  if (w->summary.oom || w->event.oom)
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory encoding a TensorBoard event for '%s'", w->path);
  uint8_t head[12], tail[4];
  le_bytes(head, (uint64_t)w->event.n, 8);
  le_bytes(head + 8, zt__crc32c_mask(zt__crc32c(head, 8)), 4);
  le_bytes(tail, zt__crc32c_mask(zt__crc32c(w->event.p, w->event.n)), 4);
  errno = 0;
  if (fwrite(head, 1, 12, w->f) != 12 || fwrite(w->event.p, 1, w->event.n, w->f) != w->event.n ||
      fwrite(tail, 1, 4, w->f) != 4)
    return write_failed(w, errno ? errno : EIO);
  return ZT_OK;
}

/* Starts w->event with wall_time and step (step 0 is proto3's default and is left out). */
static void event_begin(zt__tb *w, int64_t step) {
  w->event.n = 0;
  w->event.oom = false;
  pb_double(&w->event, EVENT_WALL_TIME, wall_time_now());
  if (step) {
    pb_key(&w->event, EVENT_STEP, WIRE_VARINT);
    pb_varint(&w->event, (uint64_t)step); /* int64: negatives take 10 bytes (two's complement) */
  }
}

static void summary_add(pbuf *s, const char *tag, double value) {
  size_t tn = strlen(tag);
  size_t value_len = 1 + varint_len(tn) + tn + 1 + 4;
  pb_key(s, SUMMARY_VALUE, WIRE_LEN);
  pb_varint(s, value_len);
  pb_bytes(s, VALUE_TAG, tag, tn);
  pb_float(s, VALUE_SIMPLE_VALUE, (float)value);
}

/* Event = wall_time, step, summary (w->summary). */
static zt_status write_summary_event(zt__tb *w, int64_t step) {
  event_begin(w, step);
  pb_bytes(&w->event, EVENT_SUMMARY, w->summary.p, w->summary.n);
  return write_record(w);
}

static zt_status check_tag(const char *tag, const char *fn) {
  if (!tag || !*tag) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the tag is NULL or empty", fn);
  if (strlen(tag) > TB_TAG_MAX)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the tag '%.40s...' is longer than %d bytes", fn, tag, TB_TAG_MAX);
  return ZT_OK;
}

zt_status zt__tb_scalar(zt__tb *w, const char *tag, int64_t step, double value) {
  ZT_TRY(check_usable(w, "zt__tb_scalar"));
  ZT_TRY(check_tag(tag, "zt__tb_scalar"));
  w->summary.n = 0;
  w->summary.oom = false;
  summary_add(&w->summary, tag, value);
  return write_summary_event(w, step);
}

zt_status zt__tb_flush(zt__tb *w) {
  ZT_TRY(check_usable(w, "zt__tb_flush"));
  errno = 0;
  if (fflush(w->f) != 0) return write_failed(w, errno ? errno : EIO);
  return ZT_OK;
}

zt_status zt__tb_scalars(zt__tb *w, int64_t step, int n, const char *const *tags, const double *values) {
  ZT_TRY(check_usable(w, "zt__tb_scalars"));
  if (n < 0 || (n && (!tags || !values))) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__tb_scalars: NULL tags or values");
  for (int i = 0; i < n; i++) ZT_TRY(check_tag(tags[i], "zt__tb_scalars"));
  pbuf *s = &w->summary;
  s->n = 0;
  s->oom = false;
  for (int i = 0; i < n; i++) summary_add(s, tags[i], values[i]);
  ZT_TRY(write_summary_event(w, step));
  return zt__tb_flush(w);
}

static void tb_free(zt__tb *w) {
  free(w->summary.p);
  free(w->event.p);
  free(w->path);
  free(w);
}

zt_status zt__tb_close(zt__tb *w) {
  if (!w) return ZT_OK;
  zt_status s = ZT_OK;
  errno = 0;
  bool flushed = fflush(w->f) == 0;
  int err = errno ? errno : EIO;
  if (fclose(w->f) != 0 && flushed) flushed = false, err = errno ? errno : EIO;
  if (!flushed && !w->broken)
    s = ZT_ERR(ZT_STATUS_IO,
               "cannot write TensorBoard events to '%s': %s while closing it (check the free space and permissions "
               "of its folder; the last events may be missing)",
               w->path, strerror(err));
  tb_free(w);
  return s;
}

/* ------------------------------------------------------------------ opening */

/* mkdir of the last component only; errors say which part of the path is wrong. */
static zt_status make_dir(const char *dir) {
  if (mkdir(dir, 0777) == 0) return ZT_OK;
  int err = errno;
  struct stat st;
  if (err == EEXIST) {
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return ZT_OK;
    return ZT_ERR(ZT_STATUS_IO,
                  "cannot write TensorBoard events into '%s': it exists and is not a folder (give the path of a "
                  "folder, new or existing)",
                  dir);
  }
  if (err == ENOENT)
    return ZT_ERR(ZT_STATUS_IO,
                  "cannot create the TensorBoard folder '%s': its parent folder does not exist (only the last "
                  "folder of the path is created: create the parent first)",
                  dir);
  if (err == ENOTDIR)
    return ZT_ERR(ZT_STATUS_IO,
                  "cannot create the TensorBoard folder '%s': a part of its parent path is a file, not a folder",
                  dir);
  return ZT_ERR(ZT_STATUS_IO, "cannot create the TensorBoard folder '%s': %s", dir, strerror(err));
}

#define EVENTS_PREFIX "events.out.tfevents."

/* The largest <seconds> among dir's events.out.tfevents.<seconds>[.*] files (-1: none). */
static zt_status newest_event_seconds(const char *dir, long long *out) {
  *out = -1;
  DIR *d = opendir(dir);
  if (!d)
    return ZT_ERR(ZT_STATUS_IO, "cannot list the TensorBoard folder '%s': %s (check its permissions)", dir,
                  strerror(errno));
  const size_t plen = strlen(EVENTS_PREFIX);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, EVENTS_PREFIX, plen)) continue;
    const char *p = e->d_name + plen;
    long long v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 18; p++, digits++) v = v * 10 + (*p - '0');
    if (digits && (*p == '.' || *p == '\0') && v > *out) *out = v;
  }
  closedir(d);
  return ZT_OK;
}

/* Writes the file_version and START records; the caller removes the file on failure. */
static zt_status write_preamble(zt__tb *w, int64_t resume_step) {
  event_begin(w, 0);
  static const char version[] = "brain.Event:2";
  pb_bytes(&w->event, EVENT_FILE_VERSION, version, sizeof version - 1);
  ZT_TRY(write_record(w));
  event_begin(w, resume_step + 1);
  uint8_t start[2] = {SESSION_LOG_STATUS << 3 | WIRE_VARINT, SESSION_LOG_START};
  pb_bytes(&w->event, EVENT_SESSION_LOG, start, sizeof start);
  ZT_TRY(write_record(w));
  return zt__tb_flush(w);
}

zt_status zt__tb_open(const char *dir, int64_t resume_step, zt__tb **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__tb_open: out is NULL");
  *out = NULL;
  if (!dir || !*dir) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__tb_open: the folder path is empty");
  if (resume_step < 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__tb_open('%s'): resume_step %lld is negative", dir,
                  (long long)resume_step);
  ZT_TRY(make_dir(dir));
  long long newest;
  ZT_TRY(newest_event_seconds(dir, &newest));

  char host[256];
  if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  for (char *c = host; *c; c++)
    if (*c == '/') *c = '_';

  size_t dlen = strlen(dir);
  while (dlen > 1 && dir[dlen - 1] == '/') dlen--; /* "runs/" -> "runs/events..." not "runs//events..." */
  size_t cap = dlen + strlen(host) + 96;
  zt__tb *w = calloc(1, sizeof *w);
  char *path = malloc(cap);
  if (!w || !path) {
    free(w);
    free(path);
    return ZT_ERR(ZT_STATUS_OOM, "zt__tb_open('%s'): out of host memory", dir);
  }
  w->path = path;
  /* the clock the events' wall_time uses (time() reads a coarse clock that can trail it by a tick) */
  long long secs = (long long)wall_time_now();
  if (newest >= secs) secs = newest + 1;
  int fd = -1;
  for (int attempt = 0; attempt < 1000; attempt++, secs++) {
    snprintf(path, cap, "%.*s%s" EVENTS_PREFIX "%lld.%s.%ld", (int)dlen, dir, dir[dlen - 1] == '/' ? "" : "/", secs,
             host, (long)getpid());
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
  }
  if (fd < 0) {
    zt_status s = ZT_ERR(ZT_STATUS_IO,
                         "cannot create the TensorBoard event file '%s': %s (check the permissions of '%s')", path,
                         strerror(errno), dir);
    tb_free(w);
    return s;
  }
  w->f = fdopen(fd, "wb");
  if (!w->f) {
    zt_status s = ZT_ERR(ZT_STATUS_IO, "cannot open the TensorBoard event file '%s': %s", path, strerror(errno));
    close(fd);
    unlink(path);
    tb_free(w);
    return s;
  }
  zt_status s = write_preamble(w, resume_step);
  if (s) {
    fclose(w->f);
    unlink(path);
    tb_free(w);
    return s;
  }
  *out = w;
  return ZT_OK;
}
