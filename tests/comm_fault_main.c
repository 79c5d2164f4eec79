/* Fault scenarios for the comm layer's timeouts, run under mpirun by comm_fault_test.sh
 * (one scenario per run, named by argv[1]); each rank prints what it saw to stderr and the
 * script checks exit status, elapsed time and messages. Not a unit test (not test_*.c):
 * some scenarios end the job with zt_comm_abort on purpose. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "zt/comm.h"

static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
         1e-6 * (double)u.ru_stime.tv_usec;
}

/* A 4-element f32 tensor of value v. */
static zt_tensor *vec(double v) {
  zt_tensor *t = NULL;
  if (zt_tensor_full(1, (int64_t[]){4}, ZT_DTYPE_F32, ZT_CPU, v, &t)) return NULL;
  return t;
}

/* What the CLI is meant to do on a comm failure: print the message, end the job. */
static void fail_and_abort(zt_comm *w, const char *what, int code) {
  fprintf(stderr, "rank %d: %s: %s\n", zt_comm_rank(w), what, zt_last_error());
  fflush(stderr);
  zt_comm_abort(w, code);
}

/* The last rank stops itself (SIGSTOP) after a barrier; the others all-reduce, time out,
 * print the message and abort the job. */
static int scenario_stop(zt_comm *w, int rank, int size) {
  if (zt_barrier(w)) fail_and_abort(w, "barrier", 5);
  if (rank == size - 1) {
    fprintf(stderr, "rank %d: stopping myself before the all_reduce\n", rank);
    fflush(stderr);
    raise(SIGSTOP);
    /* mpirun continues a stopped rank before it terminates it */
    fprintf(stderr, "rank %d: continued (mpirun ending the job)\n", rank);
    for (;;) pause();
  }
  zt_tensor *t = vec(1);
  double t0 = zt_clock_now();
  zt_status s = zt_all_reduce(w, t, ZT_REDUCE_SUM);
  fprintf(stderr, "rank %d: all_reduce returned %s after %.1f s\n", rank, zt_status_name(s), zt_clock_now() - t0);
  if (s == ZT_OK) return 1;
  fail_and_abort(w, "all_reduce failed", 3);
  return 1; /* not reached under MPI */
}

/* Rank 0 receives from the last rank, which stops itself; the others wait at a barrier. */
static int scenario_recv(zt_comm *w, int rank, int size) {
  if (zt_barrier(w)) fail_and_abort(w, "barrier", 5);
  if (rank == size - 1) {
    raise(SIGSTOP);
    for (;;) pause();
  }
  zt_tensor *t = vec(0);
  zt_status s = rank == 0 ? zt_recv(w, t, size - 1, 7) : zt_barrier(w);
  if (s == ZT_OK) return 1;
  /* ranks 0 and 1 time out at about the same moment and both messages are checked: print at
   * once, abort a little later, so the first abort does not cut the other's message */
  fprintf(stderr, "rank %d: %s: %s\n", rank, rank == 0 ? "recv failed" : "barrier failed", zt_last_error());
  fflush(stderr);
  sleep(2);
  zt_comm_abort(w, 3);
  return 1;
}

/* Rank 1 hits an error and ends the job while the others wait in an all_reduce. */
static int scenario_abort(zt_comm *w, int rank, int size) {
  (void)size;
  if (zt_barrier(w)) fail_and_abort(w, "barrier", 5);
  if (rank == 1) {
    usleep(200000); /* let the others enter the all_reduce */
    fprintf(stderr, "rank 1: cannot read the batch file (simulated error); ending the job\n");
    fflush(stderr);
    zt_comm_abort(w, 4);
    return 1;
  }
  zt_tensor *t = vec(1);
  zt_status s = zt_all_reduce(w, t, ZT_REDUCE_SUM);
  fprintf(stderr, "rank %d: all_reduce returned %s (unexpected: the job should have ended): %s\n", rank,
          zt_status_name(s), zt_last_error());
  return 1;
}

/* A namer for the scenario below: world rank w is "worker a", "worker b", ... */
static void worker_label(int w, char *buf, size_t cap, void *ud) {
  (void)ud;
  snprintf(buf, cap, "worker %c", 'a' + w % 26);
}

/* What follows a timeout, in a group whose ranks are not the world's: ranks 1 and 2 form one
 * (group ranks 0 and 1) and the last rank stops itself; rank 1's all_reduce times out naming
 * it by world rank, label and group rank, and rank 1's later calls on the group (the wait of
 * a receive posted before, a barrier) fail at once with messages that carry that first one.
 * Rank 0 waits for the end of the job. */
static int scenario_later(zt_comm *w, int rank, int size) {
  zt_comm_set_rank_namer(worker_label, NULL);
  zt_comm *sub = NULL;
  if (zt_comm_split(w, rank >= 1, rank, &sub) || zt_barrier(w)) fail_and_abort(w, "split", 5);
  if (rank == size - 1) raise(SIGSTOP);
  if (rank == 0 || rank == size - 1)
    for (;;) pause(); /* ended by rank 1's abort */
  zt_tensor *t = vec(1), *r = vec(0);
  zt_comm_work *pending = NULL;
  if (zt_irecv(sub, r, 1, 5, &pending)) fail_and_abort(w, "irecv", 5);
  if (zt_all_reduce(sub, t, ZT_REDUCE_SUM) == ZT_OK) return 1;
  fprintf(stderr, "rank %d: first: %s\n", rank, zt_last_error());
  double t0 = zt_clock_now();
  zt_status s = zt_comm_wait(pending);
  fprintf(stderr, "rank %d: later wait: %s after %.1f s: %s\n", rank, zt_status_name(s), zt_clock_now() - t0,
          zt_last_error());
  t0 = zt_clock_now();
  s = zt_barrier(sub);
  fprintf(stderr, "rank %d: later barrier: %s after %.1f s: %s\n", rank, zt_status_name(s), zt_clock_now() - t0,
          zt_last_error());
  fflush(stderr);
  zt_comm_abort(w, 3);
  return 1;
}

/* The last rank arrives 1 s late (timeout 3 s): everyone succeeds, and the waiting ranks
 * use little CPU while they wait. */
static int scenario_slow(zt_comm *w, int rank, int size) {
  if (zt_barrier(w)) fail_and_abort(w, "barrier", 5);
  if (rank == size - 1) usleep(1000000);
  zt_tensor *t = vec(rank + 1);
  double t0 = zt_clock_now(), c0 = cpu_s();
  zt_status s = zt_all_reduce(w, t, ZT_REDUCE_SUM);
  double wall = zt_clock_now() - t0, cpu = cpu_s() - c0;
  int rc = 0;
  if (s != ZT_OK) {
    fprintf(stderr, "rank %d: all_reduce failed: %s\n", rank, zt_last_error());
    rc = 1;
  } else if (zt_tensor_get(t, 0) != size * (size + 1) / 2.0) {
    fprintf(stderr, "rank %d: wrong sum %g\n", rank, zt_tensor_get(t, 0));
    rc = 1;
  }
  fprintf(stderr, "rank %d: waited %.2f s, cpu %.3f s (%.0f%% of a core)\n", rank, wall, cpu,
          wall > 0 ? 100 * cpu / wall : 0);
  /* a rank that waited ~1 s must not have spun through it */
  if (rank != size - 1 && wall > 0.5 && cpu > 0.3 * wall) {
    fprintf(stderr, "rank %d: FAIL: busy-waited (cpu %.3f s over %.2f s)\n", rank, cpu, wall);
    rc = 1;
  }
  zt_tensor_free(t);
  return rc;
}

int main(int argc, char **argv) {
  const char *sc = argc > 1 ? argv[1] : "";
  zt_comm *w = NULL;
  if (zt_comm_world(&w)) {
    fprintf(stderr, "zt_comm_world: %s\n", zt_last_error());
    return 1;
  }
  int rank = zt_comm_rank(w), size = zt_comm_size(w), rc = 2;
  const char *dir = getenv("ZT_FAULT_DIR");
  if (dir) { /* so that the script can kill what is left, by pid */
    char path[512];
    snprintf(path, sizeof path, "%s/pid.%d", dir, rank);
    FILE *f = fopen(path, "w");
    if (f) fprintf(f, "%d\n", (int)getpid()), fclose(f);
  }
  if (size < 3) {
    fprintf(stderr, "comm_fault: run with mpirun -np 3 (or more)\n");
  } else if (!strcmp(sc, "stop")) {
    rc = scenario_stop(w, rank, size);
  } else if (!strcmp(sc, "recv")) {
    rc = scenario_recv(w, rank, size);
  } else if (!strcmp(sc, "abort")) {
    rc = scenario_abort(w, rank, size);
  } else if (!strcmp(sc, "later")) {
    rc = scenario_later(w, rank, size);
  } else if (!strcmp(sc, "slow")) {
    rc = scenario_slow(w, rank, size);
  } else {
    fprintf(stderr, "usage: mpirun -np 3 comm_fault stop|recv|later|abort|slow\n");
  }
  zt_comm_free(w);
  return rc;
}
