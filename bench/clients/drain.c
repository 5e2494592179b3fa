/*
 * drain: the C side of the benchmark's client-loop comparison (bench/run,
 * clients phase; the same steps as crates/client/examples/drain.rs).
 *
 *   drain SOCKET INTERFACE COUNT
 *
 * Opens a session (udp, 96 bytes), prints "ready", waits for a line on
 * stdin, then runs ringcap_dispatch with a counting callback until COUNT
 * packets (or 2 s without one) and prints "drained N packets B bytes in S s".
 */
#include <ringcap.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct count {
    unsigned long long n, bytes;
};

static void on_packet(void *user, const ringcap_pkthdr *h, const uint8_t *data) {
    struct count *c = user;
    (void)data;
    c->n++;
    c->bytes += h->caplen;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: drain SOCKET INTERFACE COUNT\n");
        return 2;
    }
    unsigned long long want = strtoull(argv[3], NULL, 10);
    char err[RINGCAP_ERRBUF_SIZE];
    ringcap_options o;
    ringcap_options_init(&o);
    o.socket_path = argv[1];
    o.interfaces = argv[2];
    o.filter = "udp";
    o.snaplen = 96;
    ringcap_session *s;
    if (ringcap_open(&o, &s, err, sizeof err) != RINGCAP_OK) {
        fprintf(stderr, "drain: %s\n", err);
        return 2;
    }
    printf("ready\n");
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 2;
    struct count c = {0, 0};
    double t0 = now_s(), last = t0;
    while (c.n < want && now_s() - last < 2.0) {
        int got = ringcap_dispatch(s, -1, on_packet, &c, err, sizeof err);
        if (got < 0) {
            fprintf(stderr, "drain: %s\n", err);
            return 2;
        }
        if (got == 0)
            ringcap_wait(s, 10, err, sizeof err);
        else
            last = now_s();
    }
    printf("drained %llu packets %llu bytes in %.6f s\n", c.n, c.bytes, now_s() - t0);
    ringcap_close(s, NULL, NULL, 0);
    return 0;
}
