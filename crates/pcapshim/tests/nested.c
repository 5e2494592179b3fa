/* Calls nested in a read on the same handle, as tools make them: from the
 * packet callback (pcap_stats, pcap_snapshot, pcap_datalink, and
 * pcap_dump_open at the first packet, as tcpdump opens its next file at a
 * -C/-G rotation) and from a signal handler interrupting the read
 * (pcap_stats, as tcpdump's SIGUSR1). Before reading, a fork()ed child
 * closes its copy of the handle and exits: the parent's capture goes on.
 *
 * usage: nested IFACE FILTER COUNT DUMPFILE [NETMASK]
 * (NETMASK, for pcap_compile: a number as strtoul reads it; the default is
 * PCAP_NETMASK_UNKNOWN)
 * prints: "callback stats R snapshot S datalink D", "handler stats R",
 * "dump opened", then "got N" and "stats RECV DROP". */
#include <pcap/pcap.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pcap_t *p;
static pcap_dumper_t *dumper;
static const char *dumpfile;
static long got;
static volatile sig_atomic_t handler_rc = 99;

static void on_alarm(int s) {
    (void)s;
    struct pcap_stat st;
    handler_rc = pcap_stats(p, &st);
}

static void cb(u_char *u, const struct pcap_pkthdr *h, const u_char *d) {
    (void)u;
    if (got == 0) {
        struct pcap_stat st;
        int r = pcap_stats(p, &st);
        printf("callback stats %d snapshot %d datalink %d\n", r, pcap_snapshot(p), pcap_datalink(p));
        if (r < 0)
            printf("callback stats error: %s\n", pcap_geterr(p));
        dumper = pcap_dump_open(p, dumpfile);
        if (dumper)
            printf("dump opened\n");
        else
            printf("dump_open error: %s\n", pcap_geterr(p));
        /* A signal while the next read waits. */
        alarm(1);
    }
    if (dumper)
        pcap_dump((u_char *)dumper, h, d);
    got++;
}

int main(int argc, char **argv) {
    char err[PCAP_ERRBUF_SIZE];
    struct bpf_program prog;
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: nested IFACE FILTER COUNT DUMPFILE [NETMASK]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    dumpfile = argv[4];
    p = pcap_open_live(argv[1], 65535, 0, 100, err);
    if (!p) {
        printf("open: %s\n", err);
        return 1;
    }
    bpf_u_int32 netmask = argc == 6 ? (bpf_u_int32)strtoul(argv[5], NULL, 0) : PCAP_NETMASK_UNKNOWN;
    if (pcap_compile(p, &prog, argv[2], 1, netmask) < 0 || pcap_setfilter(p, &prog) < 0) {
        printf("filter: %s\n", pcap_geterr(p));
        return 1;
    }
    pid_t c = fork();
    if (c == 0) {
        pcap_close(p);
        _exit(0);
    }
    waitpid(c, NULL, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    fprintf(stderr, "ready\n");
    int r = pcap_loop(p, atoi(argv[3]), cb, NULL);
    if (r < 0)
        printf("loop %d: %s\n", r, pcap_geterr(p));
    /* The alarm may still be due: wait for it (a read is no longer running),
     * with SIGALRM blocked between the check and the wait. */
    sigset_t alrm, old;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    sigprocmask(SIG_BLOCK, &alrm, &old);
    while (handler_rc == 99 && got > 0)
        sigsuspend(&old);
    sigprocmask(SIG_SETMASK, &old, NULL);
    printf("handler stats %d\n", (int)handler_rc);
    if (dumper)
        pcap_dump_close(dumper);
    struct pcap_stat st;
    if (pcap_stats(p, &st) == 0)
        printf("stats %u %u\n", st.ps_recv, st.ps_drop);
    printf("got %ld\n", got);
    pcap_close(p);
    return 0;
}
