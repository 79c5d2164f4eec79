/* zth_delay: a fixed one-way delay for the packets a host of the hosts harness receives, in
 * place of `tc netem delay` where the kernel has no netem (CONFIG_NET_SCH_NETEM unset). Run
 * inside the host's network namespace, after an nftables rule that queues the packets
 * (`queue num Q bypass`, hosts_lib.sh's hosts_netem): it binds NFQUEUE Q through raw
 * netlink (no library), takes each packet's metadata only (copy mode META: the packet stays
 * in the kernel), and accepts each DELAY_US microseconds after it arrived, in arrival order
 * (a fixed delay keeps the order, as netem's does without jitter). GSO packets are queued
 * whole, and a full queue lets packets through (fail-open) rather than dropping them.
 *   zth_delay QUEUE DELAY_US
 * Runs until killed (hosts_netem HOST clear, or hosts_down). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RING (1 << 16)

static int fd;
static uint16_t queue;
static uint32_t seq = 1;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* one nfnetlink message of subsystem QUEUE: header, nfgenmsg, then attributes appended */
struct msg {
  char buf[256];
  size_t len;
};

static void msg_start(struct msg *m, int type) {
  memset(m, 0, sizeof *m);
  struct nlmsghdr *h = (struct nlmsghdr *)m->buf;
  h->nlmsg_type = (uint16_t)((NFNL_SUBSYS_QUEUE << 8) | type);
  h->nlmsg_flags = NLM_F_REQUEST;
  h->nlmsg_seq = seq++;
  struct nfgenmsg *g = (struct nfgenmsg *)(m->buf + NLMSG_HDRLEN);
  g->nfgen_family = AF_UNSPEC;
  g->version = NFNETLINK_V0;
  g->res_id = htons(queue);
  m->len = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof *g);
}

static void msg_attr(struct msg *m, int type, const void *data, size_t n) {
  struct nlattr *a = (struct nlattr *)(m->buf + m->len);
  a->nla_type = (uint16_t)type;
  a->nla_len = (uint16_t)(NLA_HDRLEN + n);
  memcpy((char *)a + NLA_HDRLEN, data, n);
  m->len += NLA_ALIGN(NLA_HDRLEN + n);
}

static int msg_send(struct msg *m) {
  ((struct nlmsghdr *)m->buf)->nlmsg_len = (uint32_t)m->len;
  struct sockaddr_nl k = {.nl_family = AF_NETLINK};
  return sendto(fd, m->buf, m->len, 0, (struct sockaddr *)&k, sizeof k) < 0 ? -1 : 0;
}

static int verdict(uint32_t id, uint32_t v) {
  struct msg m;
  msg_start(&m, NFQNL_MSG_VERDICT);
  struct nfqnl_msg_verdict_hdr vh = {.verdict = htonl(v), .id = htonl(id)};
  msg_attr(&m, NFQA_VERDICT_HDR, &vh, sizeof vh);
  return msg_send(&m);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: zth_delay QUEUE DELAY_US\n");
    return 2;
  }
  queue = (uint16_t)atoi(argv[1]);
  double delay = atof(argv[2]);
  fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER);
  if (fd < 0) {
    perror("zth_delay: netlink socket");
    return 1;
  }
  int big = 16 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
  int one = 1;
  setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
  struct sockaddr_nl me = {.nl_family = AF_NETLINK};
  if (bind(fd, (struct sockaddr *)&me, sizeof me)) {
    perror("zth_delay: bind");
    return 1;
  }
  struct msg m;
  msg_start(&m, NFQNL_MSG_CONFIG);
  struct nfqnl_msg_config_cmd cmd = {.command = NFQNL_CFG_CMD_BIND, .pf = htons(AF_INET)};
  msg_attr(&m, NFQA_CFG_CMD, &cmd, sizeof cmd);
  if (msg_send(&m)) {
    perror("zth_delay: bind queue");
    return 1;
  }
  msg_start(&m, NFQNL_MSG_CONFIG);
  struct nfqnl_msg_config_params p = {.copy_range = htonl(0), .copy_mode = NFQNL_COPY_META};
  msg_attr(&m, NFQA_CFG_PARAMS, &p, sizeof p);
  uint32_t maxlen = htonl(RING / 2);
  msg_attr(&m, NFQA_CFG_QUEUE_MAXLEN, &maxlen, sizeof maxlen);
  uint32_t flags = htonl(NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO);
  msg_attr(&m, NFQA_CFG_FLAGS, &flags, sizeof flags);
  msg_attr(&m, NFQA_CFG_MASK, &flags, sizeof flags);
  if (msg_send(&m)) {
    perror("zth_delay: configure queue");
    return 1;
  }
  static uint32_t ids[RING];
  static double due[RING];
  size_t head = 0, tail = 0; /* held packets: ids[head..tail) in arrival order */
  static char buf[1 << 16];
  for (;;) {
    double t = now_us();
    while (head != tail && due[head % RING] <= t) {
      if (verdict(ids[head % RING], NF_ACCEPT)) perror("zth_delay: verdict");
      head++;
    }
    struct timespec to = {1, 0}, *top = &to;
    if (head != tail) {
      double w = due[head % RING] - t;
      to.tv_sec = (time_t)(w / 1e6);
      to.tv_nsec = (long)((w - to.tv_sec * 1e6) * 1e3);
    }
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int r = ppoll(&pf, 1, top, NULL);
    if (r < 0 && errno != EINTR) {
      perror("zth_delay: poll");
      return 1;
    }
    if (r <= 0) continue;
    for (;;) {
      ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0) break;
      double arrived = now_us();
      for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
          struct nlmsgerr *e = NLMSG_DATA(h);
          if (e->error) fprintf(stderr, "zth_delay: netlink error %d\n", e->error);
          continue;
        }
        if ((h->nlmsg_type & 0xff) != NFQNL_MSG_PACKET) continue;
        size_t off = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(struct nfgenmsg));
        while (off + NLA_HDRLEN <= h->nlmsg_len) {
          struct nlattr *a = (struct nlattr *)((char *)h + off);
          if (a->nla_len < NLA_HDRLEN) break;
          if ((a->nla_type & NLA_TYPE_MASK) == NFQA_PACKET_HDR) {
            struct nfqnl_msg_packet_hdr *ph = (void *)((char *)a + NLA_HDRLEN);
            uint32_t id = ntohl(ph->packet_id);
            if (tail - head >= RING) { /* never with the queue's maxlen below RING */
              verdict(id, NF_ACCEPT);
            } else {
              ids[tail % RING] = id;
              due[tail % RING] = arrived + delay;
              tail++;
            }
            break;
          }
          off += NLA_ALIGN(a->nla_len);
        }
      }
    }
  }
}
