/* libFuzzer target: the JSON reader (zt__json_parse) on raw bytes. Oracle: in every parsed
 * object, zt__json_get finds each member by its key (keys are unique and the sorted index
 * agrees with file order); the number conversions run on every number. */
#include <stdlib.h>

#include "fuzz_util.h"
#include "io/json.h"

static void walk(const zt__json *j, int depth) {
  if (j->kind == ZT__JSON_NUMBER) {
    int64_t i;
    uint64_t u;
    double d;
    (void)zt__json_i64(j, &i);
    (void)zt__json_u64(j, &u);
    if (!zt__json_f64(j, &d)) zt_fuzz_fail("a NUMBER did not convert to a double");
  }
  if (j->kind != ZT__JSON_ARRAY && j->kind != ZT__JSON_OBJECT) return;
  for (int i = 0; i < j->n; i++) {
    if (j->kind == ZT__JSON_OBJECT && zt__json_get(j, j->keys[i]) != &j->items[i])
      zt_fuzz_fail("zt__json_get(\"%s\") does not find member %d of %d", j->keys[i], i, j->n);
    walk(&j->items[i], depth + 1);
  }
  if (j->kind == ZT__JSON_OBJECT && zt__json_get(j, "\x01not a key") != NULL)
    zt_fuzz_fail("zt__json_get found a key that is not there");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zt_fuzz_init();
  zt__json *j = NULL;
  if (zt__json_parse((const char *)data, size, "fuzz input", &j) == ZT_OK) {
    walk(j, 0);
    zt__json_free(j);
  } else if (j) {
    zt_fuzz_fail("a failed parse returned a value");
  }
  return 0;
}
