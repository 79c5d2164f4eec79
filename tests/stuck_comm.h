/* A test group whose peers never answer (tests/stuck_comm.c): what a stopped rank looks like
 * to the ranks that wait for it, in one process and without timing beyond a short timeout. */
#ifndef ZT_TEST_STUCK_COMM_H
#define ZT_TEST_STUCK_COMM_H

#include "zt/comm.h"

/* A group of `size` ranks in which this process is `rank`: every operation it starts stays
 * pending (its peers never come), so each wait times out after timeout_s. Group rank r is
 * world rank world[r] (copied; world NULL: no world, messages say "rank R"). The arrival board
 * shows the peers as having made no call. Free it with zt_comm_free. NULL on failure. */
zt_comm *zt_test_stuck_comm(int rank, int size, const int *world, double timeout_s);

#endif
