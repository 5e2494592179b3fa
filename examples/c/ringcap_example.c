/*
 * ringcap_example: capture through ringcapd with libringcap and write the
 * packets to a pcap file (nanosecond timestamps), like `tcpdump -w`.
 *
 *   cc -o ringcap_example ringcap_example.c $(pkg-config --cflags --libs ringcap)
 *   ringcap_example -i eth0 [-s SNAPLEN] [-c COUNT] [-S SOCKET] [-z] -w out.pcap [FILTER]
 *
 * -z asks the daemon to compress the stream it hands over (the library
 * decodes it: the file is the same).
 *
 * Runs until COUNT packets, the end of the session, or SIGINT/SIGTERM; on a
 * signal it stops the session and still writes every packet the daemon
 * delivered before the end. Prints the counters at exit.
 */
#include <ringcap.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ringcap_session *session;

static void on_signal(int sig) {
    (void)sig;
    ringcap_breakloop(session); /* async-signal-safe: sets a flag */
}

struct out {
    FILE *f;
    unsigned long long packets;
    int failed;
};

static void put32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); } /* little-endian host */
static void put16(FILE *f, uint16_t v) { fwrite(&v, 2, 1, f); }

static void write_header(FILE *f, uint32_t snaplen) {
    put32(f, 0xa1b23c4d); /* pcap, nanosecond timestamps */
    put16(f, 2);
    put16(f, 4);
    put32(f, 0);
    put32(f, 0);
    put32(f, snaplen);
    put32(f, 1); /* LINKTYPE_ETHERNET */
}

static void on_packet(void *user, const ringcap_pkthdr *h, const uint8_t *data) {
    struct out *o = user;
    put32(o->f, (uint32_t)(h->ts_ns / 1000000000u));
    put32(o->f, (uint32_t)(h->ts_ns % 1000000000u));
    put32(o->f, h->caplen);
    put32(o->f, h->wire_len);
    if (fwrite(data, 1, h->caplen, o->f) != h->caplen)
        o->failed = 1;
    o->packets++;
}

static void print_stats(const char *what, const ringcap_stats *st) {
    fprintf(stderr,
            "ringcap_example: %s: seen %llu accepted %llu sampled_out %llu rate_limited %llu "
            "dropped_ring %llu dropped_client %llu delivered %llu bytes %llu\n",
            what, (unsigned long long)st->seen_by_interface,
            (unsigned long long)st->filter_accepted, (unsigned long long)st->sampled_out,
            (unsigned long long)st->rate_limited, (unsigned long long)st->dropped_ring,
            (unsigned long long)st->dropped_client, (unsigned long long)st->delivered,
            (unsigned long long)st->bytes_delivered);
}

int main(int argc, char **argv) {
    ringcap_options opts;
    ringcap_options_init(&opts);
    const char *out_path = NULL;
    int count = 0, c;
    while ((c = getopt(argc, argv, "i:s:c:S:zw:")) != -1) {
        switch (c) {
        case 'i': opts.interfaces = optarg; break;
        case 's': opts.snaplen = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'c': count = atoi(optarg); break;
        case 'S': opts.socket_path = optarg; break;
        case 'z': opts.compress = 1; break;
        case 'w': out_path = optarg; break;
        default:
            fprintf(stderr, "usage: %s -i IF [-s SNAP] [-c N] [-S SOCKET] [-z] -w FILE [FILTER]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!opts.interfaces || !out_path) {
        fprintf(stderr, "ringcap_example: -i and -w are required\n");
        return 2;
    }
    if (optind < argc)
        opts.filter = argv[optind];

    char err[RINGCAP_ERRBUF_SIZE];
    int rc = ringcap_open(&opts, &session, err, sizeof err);
    if (rc != RINGCAP_OK) {
        fprintf(stderr, "ringcap_example: open: %s (%s)\n", err, ringcap_strerror(rc));
        return 1;
    }
    struct out o = {fopen(out_path, "wb"), 0, 0};
    if (!o.f) {
        perror(out_path);
        ringcap_close(session, NULL, NULL, 0);
        return 1;
    }
    char desc[1024];
    ringcap_describe(session, desc, sizeof desc);
    write_header(o.f, opts.snaplen ? opts.snaplen : 262144);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    fprintf(stderr, "ringcap_example: capturing: %s\n", desc);

    rc = ringcap_loop(session, count, on_packet, &o, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "ringcap_example: loop: %s\n", err);
        ringcap_close(session, NULL, NULL, 0);
        return 1;
    }
    ringcap_stats st;
    if (count > 0 && rc >= count) {
        /* Enough: what else is in the ring is not wanted. */
        rc = ringcap_close(session, &st, err, sizeof err);
        if (rc != RINGCAP_OK)
            fprintf(stderr, "ringcap_example: close: %s\n", err);
        fclose(o.f);
        print_stats("final", &st);
        fprintf(stderr, "ringcap_example: wrote %llu packets\n", o.packets);
        return rc == RINGCAP_OK ? 0 : 1;
    }
    /* Stop the session, then take what the daemon delivered before the end. */
    rc = ringcap_stop(session, &st, err, sizeof err);
    if (rc != RINGCAP_OK) {
        fprintf(stderr, "ringcap_example: stop: %s\n", err);
        ringcap_close(session, NULL, NULL, 0);
        return 1;
    }
    while ((rc = ringcap_dispatch(session, 0, on_packet, &o, err, sizeof err)) > 0) {
    }
    if (rc < 0) {
        fprintf(stderr, "ringcap_example: dispatch: %s\n", err);
        return 1;
    }
    rc = ringcap_close(session, NULL, err, sizeof err);
    if (rc != RINGCAP_OK)
        fprintf(stderr, "ringcap_example: close: %s\n", err);
    if (fclose(o.f) != 0 || o.failed) {
        perror(out_path);
        return 1;
    }
    print_stats("final", &st);
    fprintf(stderr, "ringcap_example: wrote %llu packets\n", o.packets);
    return 0;
}
