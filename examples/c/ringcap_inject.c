/*
 * ringcap_inject: send the frames of a pcap file through ringcapd with
 * libringcap, at their relative timestamps, and print each frame's
 * transmit report, like `ringcap inject --daemon --report`.
 *
 *   cc -o ringcap_inject ringcap_inject.c $(pkg-config --cflags --libs ringcap)
 *   ringcap_inject -i eth0 -r frames.pcap [-S SOCKET] [-d START_MS] [-t TOLERANCE_MS]
 *
 * The first frame goes START_MS (default 500) after the program starts, the
 * others at their offsets from it in the file. One line per frame on
 * stdout, as the reports arrive:
 *   TAG STATUS REQUESTED_NS SENT_NS REASON
 * (TAG is the frame's index in the file; STATUS sent, missed, refused or
 * failed; SENT_NS 0 when it did not leave). Exit 0 when every frame got its
 * report, 1 on an error.
 */
#include <ringcap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct frames {
    ringcap_inject_frame *f;
    uint8_t **data;
    size_t n;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint32_t get32(const uint8_t *p, int swap) {
    uint32_t v;
    memcpy(&v, p, 4);
    return swap ? __builtin_bswap32(v) : v;
}

/* Reads a classic pcap file (micro- or nanosecond, either byte order):
 * frame i gets tag i and at_ns = start + its offset from the first. */
static int read_pcap(const char *path, uint64_t start, uint64_t tolerance, struct frames *out) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t h[24];
    if (fread(h, 1, 24, f) != 24) {
        fprintf(stderr, "%s: not a pcap file (too short)\n", path);
        fclose(f);
        return -1;
    }
    uint32_t magic;
    memcpy(&magic, h, 4);
    int swap = magic == 0xd4c3b2a1 || magic == 0x4d3cb2a1;
    int nano = magic == 0xa1b23c4d || magic == 0x4d3cb2a1;
    if (!swap && magic != 0xa1b2c3d4 && magic != 0xa1b23c4d) {
        fprintf(stderr, "%s: not a classic pcap file (magic %08x)\n", path, magic);
        fclose(f);
        return -1;
    }
    size_t cap = 0;
    uint64_t first = 0;
    uint8_t r[16];
    while (fread(r, 1, 16, f) == 16) {
        uint64_t ts = (uint64_t)get32(r, swap) * 1000000000u +
                      (uint64_t)get32(r + 4, swap) * (nano ? 1u : 1000u);
        uint32_t len = get32(r + 8, swap);
        if (len > 262144) {
            fprintf(stderr, "%s: record %zu: %u bytes\n", path, out->n, len);
            fclose(f);
            return -1;
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 256;
            out->f = realloc(out->f, cap * sizeof *out->f);
            out->data = realloc(out->data, cap * sizeof *out->data);
            if (!out->f || !out->data) {
                fprintf(stderr, "out of memory\n");
                fclose(f);
                return -1;
            }
        }
        uint8_t *d = malloc(len ? len : 1);
        if (!d || fread(d, 1, len, f) != len) {
            fprintf(stderr, "%s: record %zu cut short\n", path, out->n);
            free(d);
            fclose(f);
            return -1;
        }
        if (out->n == 0)
            first = ts;
        ringcap_inject_frame *fr = &out->f[out->n];
        memset(fr, 0, sizeof *fr);
        fr->tag = out->n;
        fr->at_ns = start + (ts >= first ? ts - first : 0);
        fr->tolerance_ns = tolerance;
        fr->data = d;
        fr->len = len;
        out->data[out->n++] = d;
    }
    fclose(f);
    return 0;
}

static const char *status_name(int s) {
    switch (s) {
    case RINGCAP_INJECT_SENT: return "sent";
    case RINGCAP_INJECT_MISSED: return "missed";
    case RINGCAP_INJECT_REFUSED: return "refused";
    default: return "failed";
    }
}

int main(int argc, char **argv) {
    const char *iface = NULL, *file = NULL, *sock = NULL;
    long start_ms = 500, tolerance_ms = 50;
    int c;
    while ((c = getopt(argc, argv, "i:r:S:d:t:")) != -1) {
        switch (c) {
        case 'i': iface = optarg; break;
        case 'r': file = optarg; break;
        case 'S': sock = optarg; break;
        case 'd': start_ms = atol(optarg); break;
        case 't': tolerance_ms = atol(optarg); break;
        default:
            fprintf(stderr, "usage: %s -i IF -r FILE.pcap [-S SOCKET] [-d START_MS] [-t TOLERANCE_MS]\n", argv[0]);
            return 1;
        }
    }
    if (!iface || !file || start_ms < 0 || tolerance_ms < 0) {
        fprintf(stderr, "ringcap_inject: -i IF and -r FILE are required\n");
        return 1;
    }
    char err[RINGCAP_ERRBUF_SIZE];
    ringcap_options o;
    ringcap_options_init(&o);
    o.interfaces = iface;
    o.socket_path = sock;
    o.inject_only = 1;
    ringcap_session *s;
    if (ringcap_open(&o, &s, err, sizeof err) != RINGCAP_OK) {
        fprintf(stderr, "ringcap_inject: %s\n", err);
        return 1;
    }
    struct frames fr = {0};
    uint64_t start = now_ns() + (uint64_t)start_ms * 1000000u;
    if (read_pcap(file, start, (uint64_t)tolerance_ms * 1000000u, &fr) != 0) {
        ringcap_close(s, NULL, NULL, 0);
        return 1;
    }
    int rc = 0;
    if (ringcap_inject(s, fr.f, fr.n, err, sizeof err) < 0) {
        fprintf(stderr, "ringcap_inject: %s\n", err);
        rc = 1;
    }
    /* Every frame's report, polled every 5 ms, until a few seconds past the
     * last frame's time. */
    uint64_t last = fr.n ? fr.f[fr.n - 1].at_ns : start;
    uint64_t give_up = last + (uint64_t)tolerance_ms * 1000000u + 5000000000u;
    size_t got = 0;
    ringcap_inject_report rep[64];
    while (rc == 0 && got < fr.n && now_ns() < give_up) {
        int n = ringcap_inject_reports(s, rep, 64, err, sizeof err);
        if (n < 0) {
            fprintf(stderr, "ringcap_inject: %s\n", err);
            rc = 1;
            break;
        }
        for (int i = 0; i < n; i++)
            printf("%llu %s %llu %llu %s\n", (unsigned long long)rep[i].tag,
                   status_name(rep[i].status), (unsigned long long)rep[i].requested_ns,
                   (unsigned long long)rep[i].sent_ns, rep[i].reason[0] ? rep[i].reason : "-");
        got += (size_t)n;
        if (n == 0)
            usleep(5000);
    }
    fflush(stdout);
    if (rc == 0 && got < fr.n) {
        fprintf(stderr, "ringcap_inject: %zu of %zu reports arrived\n", got, fr.n);
        rc = 1;
    }
    fprintf(stderr, "ringcap_inject: %zu frames, %zu reports\n", fr.n, got);
    for (size_t i = 0; i < fr.n; i++)
        free(fr.data[i]);
    free(fr.f);
    free(fr.data);
    ringcap_close(s, NULL, NULL, 0);
    return rc;
}
