/* A libpcap program for the readiness test of libringcap_pcap.so: opens
 * IFACE live with FILTER, non-blocking, and reads only when
 * pcap_get_selectable_fd() polls readable.
 *   usage: selectable IFACE FILTER COUNT PER_DISPATCH
 * (PER_DISPATCH: pcap_dispatch's count; dumpcap reads 1 per wake-up.)
 * Prints "ready" (stderr) once capturing, then on stdout:
 *   idle N     N = 1 if the descriptor was readable with no traffic yet
 *   got N      packets read
 *   empty N    times the descriptor was readable but pcap_dispatch read none
 *   stats R D  pcap_stats: received, dropped
 * Exit 0 after COUNT packets, 1 on an error, 2 if 10 s pass without a
 * readable descriptor. */
#include <pcap/pcap.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

static long got;
static void count(u_char *u, const struct pcap_pkthdr *h, const u_char *d)
{
    (void)u; (void)h; (void)d;
    got++;
}

int main(int argc, char **argv)
{
    char err[PCAP_ERRBUF_SIZE];
    struct bpf_program prog;
    if (argc != 5) return 1;
    long want = atol(argv[3]);
    int per = atoi(argv[4]);
    pcap_t *p = pcap_open_live(argv[1], 65535, 0, 100, err);
    if (!p) { fprintf(stderr, "open: %s\n", err); return 1; }
    if (pcap_compile(p, &prog, argv[2], 1, PCAP_NETMASK_UNKNOWN) < 0 ||
        pcap_setfilter(p, &prog) < 0) {
        fprintf(stderr, "filter: %s\n", pcap_geterr(p)); return 1;
    }
    pcap_freecode(&prog);
    if (pcap_setnonblock(p, 1, err) < 0) { fprintf(stderr, "nonblock: %s\n", err); return 1; }
    if (pcap_getnonblock(p, err) != 1) { fprintf(stderr, "getnonblock\n"); return 1; }
    int fd = pcap_get_selectable_fd(p);
    if (fd < 0) { fprintf(stderr, "no selectable fd\n"); return 1; }
    if (pcap_datalink(p) != DLT_EN10MB) { fprintf(stderr, "datalink\n"); return 1; }
    /* Nothing sent yet: the descriptor must not be readable. */
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    int idle = poll(&pfd, 1, 300);
    printf("idle %d\n", idle);
    fprintf(stderr, "ready\n");
    fflush(stdout);
    fflush(stderr);
    long empty = 0;
    while (got < want) {
        pfd.revents = 0;
        int r = poll(&pfd, 1, 10000);
        if (r == 0) { printf("got %ld\nempty %ld\n", got, empty); return 2; }
        if (r < 0) { perror("poll"); return 1; }
        int n = pcap_dispatch(p, per, count, NULL);
        if (n < 0) { fprintf(stderr, "dispatch: %s\n", pcap_geterr(p)); return 1; }
        if (n == 0) empty++;
    }
    struct pcap_stat st;
    if (pcap_stats(p, &st) < 0) { fprintf(stderr, "stats: %s\n", pcap_geterr(p)); return 1; }
    printf("got %ld\nempty %ld\nstats %u %u\n", got, empty, st.ps_recv, st.ps_drop);
    pcap_close(p);
    return 0;
}
