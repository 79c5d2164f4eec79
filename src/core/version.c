/* Which zerotrain a process runs (zt --version): the release, the commit it was built from and
 * the optional backends and BLAS of the build, in one line for bug reports. */
#include <cblas.h>
#include <stdio.h>

#include "zt/status.h"
#include "zt_config.h"

const char *zt_version(void) {
  static char v[384];
  if (!v[0])
    snprintf(v, sizeof v, "%s (commit %s; MPI %s, CUDA %s, NCCL %s; %s)", ZT_VERSION, ZT_GIT_COMMIT,
             ZT_HAVE_MPI ? "yes" : "no", ZT_HAVE_CUDA ? "yes" : "no", ZT_HAVE_NCCL ? "yes" : "no", openblas_get_config());
  return v;
}
