/*
 * ringcap.h: libringcap, the C client of ringcapd (the successor of pktd's
 * libwire). Capture through the daemon as an unprivileged user, with what
 * the administrator's policy grants you: the daemon ANDs your filter with
 * the grant's, caps the snap length, may force sampling.
 *
 * Build:  cc prog.c $(pkg-config --cflags --libs ringcap)
 *
 * Conventions:
 *  - Calls return RINGCAP_OK (0) or a count (>= 0) on success and a negative
 *    RINGCAP_ERR_* code on failure. Calls that can fail take `errbuf` and
 *    `errlen`: a caller-provided buffer (may be NULL) that receives a
 *    NUL-terminated message, truncated to `errlen` bytes
 *    (RINGCAP_ERRBUF_SIZE is enough for every message but a refusal's
 *    reason, which may be longer). The library never aborts the process.
 *  - Strings are UTF-8 and NUL-terminated.
 *  - A session is used by one thread at a time. A call on a session while
 *    another runs on it (from a second thread, or from inside a packet
 *    callback) returns RINGCAP_ERR_BUSY. Only ringcap_breakloop() may be
 *    called from anywhere (another thread, a callback, a signal handler).
 *  - Packets are Ethernet frames (DLT_EN10MB), timestamps in nanoseconds.
 *
 * This header is checked against the library's Rust source by a test
 * (crates/capi/src/tests.rs): keep both in step.
 */
#ifndef RINGCAP_H
#define RINGCAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RINGCAP_ERRBUF_SIZE 256

/* Error codes. */
#define RINGCAP_OK 0
#define RINGCAP_ERR_ARG (-1)       /* bad argument (NULL, not UTF-8, out of range, options.size) */
#define RINGCAP_ERR_IO (-2)        /* socket or ring failure; daemon unreachable or gone */
#define RINGCAP_ERR_REFUSED (-3)   /* the daemon's policy refused the request */
#define RINGCAP_ERR_DAEMON (-4)    /* the daemon answered with an error */
#define RINGCAP_ERR_PROTOCOL (-5)  /* the daemon's answer did not make sense */
#define RINGCAP_ERR_ENDED (-6)     /* the session was stopped */
#define RINGCAP_ERR_INTERNAL (-7)  /* a bug in libringcap (caught, not an abort) */
#define RINGCAP_ERR_TOO_SMALL (-8) /* your buffer cannot hold the next packet */
#define RINGCAP_ERR_BUSY (-9)      /* another call on this session is running */

/* ringcap_inject_report.status. */
#define RINGCAP_INJECT_SENT 0    /* it left at sent_ns */
#define RINGCAP_INJECT_MISSED 1  /* its time had passed by more than its tolerance: not sent */
#define RINGCAP_INJECT_REFUSED 2 /* the grant refused it (reason says which rule): not sent */
#define RINGCAP_INJECT_FAILED 3  /* sending failed, or the session ended before its time */

/* Bytes of ringcap_inject_report.reason, its NUL included. */
#define RINGCAP_REASON_SIZE 128

/* ringcap_options.format (of daemon dump files). */
#define RINGCAP_FORMAT_PCAP 0
#define RINGCAP_FORMAT_PCAPNG 1

/* What to capture. Fill with ringcap_options_init(), then set fields.
 * Versioned by `size`: new fields are only ever added at the end, and the
 * library reads a field only when the caller's `size` covers it (a program
 * built against an older ringcap.h gets the defaults of later fields). */
typedef struct ringcap_options {
    uint32_t size;            /* sizeof(ringcap_options): set by ringcap_options_init */
    uint32_t snaplen;         /* bytes to keep of each packet; 0: whole packets */
    uint32_t headers_only;    /* nonzero: exactly the protocol headers, at most snaplen (0: 65535) */
    uint32_t sample_packets;  /* keep 1 packet in N; 0: no sampling asked */
    uint32_t sample_flows;    /* keep 1 flow in N; 0: none (not with sample_packets) */
    uint32_t format;          /* dump files: RINGCAP_FORMAT_PCAP or RINGCAP_FORMAT_PCAPNG */
    uint64_t count;           /* end the session after this many packets; 0: no limit */
    double duration_s;        /* end the session after this many seconds; 0: no limit */
    const char *socket_path;  /* NULL: $RINGCAP_DAEMON, else /run/ringcapd/ringcapd.sock */
    const char *interfaces;   /* required: "eth0" or "eth0,eth1" */
    const char *filter;       /* tcpdump syntax; NULL or "": all your grant allows */
    uint32_t dump;            /* nonzero: the daemon writes dump files instead of delivering */
    uint32_t inject_only;     /* nonzero: the session only injects (captures nothing) */
    uint64_t rotate_seconds;  /* dump mode: new file after this many seconds; 0: never */
    uint64_t rotate_packets;  /* dump mode: ... this many packets; 0: never */
    uint64_t rotate_bytes;    /* dump mode: ... this many bytes; 0: never */
    uint32_t compress;        /* nonzero: the daemon hands the stream over compressed (per-flow
                               * header compression in the ring); the library decodes it, so
                               * packets come out the same. Ignored in dump mode. (Added after
                               * the first version of this struct: see `size`.) */
} ringcap_options;

/* A session's counters. They add up: filter_accepted = sampled_out +
 * rate_limited + dropped_ring + dropped_client + delivered. */
typedef struct ringcap_stats {
    uint64_t seen_by_interface; /* packets the interface(s) saw */
    uint64_t filter_accepted;   /* accepted by the grant's filter AND yours */
    uint64_t sampled_out;       /* removed by sampling */
    uint64_t rate_limited;      /* over the grant's rate limit */
    uint64_t dropped_ring;      /* dropped in the daemon's kernel ring */
    uint64_t dropped_client;    /* dropped because your session's ring was full */
    uint64_t delivered;         /* delivered to your ring (or dump files) */
    uint64_t bytes_delivered;   /* bytes of those */
} ringcap_stats;

/* One packet's header. */
typedef struct ringcap_pkthdr {
    uint64_t ts_ns;    /* capture time, ns since the Unix epoch */
    uint32_t caplen;   /* bytes you have */
    uint32_t wire_len; /* length on the wire */
} ringcap_pkthdr;

/* A packet callback. `data` (h->caplen bytes) is valid only during the call.
 * It may call ringcap_breakloop() on the session, nothing else on it. */
typedef void (*ringcap_handler)(void *user, const ringcap_pkthdr *h, const uint8_t *data);

/* A frame to inject. */
typedef struct ringcap_inject_frame {
    uint64_t tag;          /* your name for it, echoed in its report */
    uint64_t at_ns;        /* when to send it: CLOCK_REALTIME ns since the epoch; 0: now */
    uint64_t tolerance_ns; /* how late it may still go; later it is reported missed */
    const uint8_t *data;   /* the whole Ethernet frame */
    uint32_t len;          /* its length in bytes */
    uint32_t reserved;     /* 0 */
} ringcap_inject_frame;

/* The report of one injected frame. */
typedef struct ringcap_inject_report {
    uint64_t tag;          /* the frame's tag */
    uint64_t requested_ns; /* when it was asked for (for "now": when the sender took it up) */
    uint64_t sent_ns;      /* when it left (kernel transmit timestamp); 0: not sent or unknown */
    int32_t status;        /* RINGCAP_INJECT_* */
    uint32_t reserved;     /* 0 */
    char reason[RINGCAP_REASON_SIZE]; /* why refused/failed, NUL-terminated; "" if sent */
} ringcap_inject_report;

typedef struct ringcap_session ringcap_session;

/* Defaults: whole packets, no filter, no sampling, the default socket, an
 * uncompressed stream. Writes at most `size` bytes (your
 * sizeof(ringcap_options)) and sets opts->size to it. Call it as
 * ringcap_options_init(&opts) (the macro below). */
void ringcap_options_init_sized(ringcap_options *opts, size_t size);

/* ringcap_options_init(opts): ringcap_options_init_sized with this header's
 * sizeof(ringcap_options). (The library also exports a function of this
 * name, for programs built against the first ringcap.h, without `compress`:
 * it fills only that version of the struct.) */
#define ringcap_options_init(opts) ringcap_options_init_sized((opts), sizeof(ringcap_options))

/* Opens a session (libwire: wire_init). On RINGCAP_OK, *out is the session. */
int ringcap_open(const ringcap_options *opts, ringcap_session **out, char *errbuf, size_t errlen);

/* Ends the session if it runs, frees it (libwire: wire_done). final_stats
 * (may be NULL) gets the final counters. Unread packets are discarded: call
 * ringcap_stop() and read until 0 first to keep them. The session is freed
 * whatever the result, except on RINGCAP_ERR_BUSY. */
int ringcap_close(ringcap_session *s, ringcap_stats *final_stats, char *errbuf, size_t errlen);

/* Ends the session and waits until the daemon has; final_stats (may be NULL)
 * gets the final counters. Packets delivered before the end stay readable:
 * ringcap_dispatch()/ringcap_read_batch() until they return 0. */
int ringcap_stop(ringcap_session *s, ringcap_stats *final_stats, char *errbuf, size_t errlen);

/* The counters now (libwire: wire_stats). */
int ringcap_get_stats(ringcap_session *s, ringcap_stats *stats, char *errbuf, size_t errlen);

/* Replaces your filter; the grant's is still ANDed (libwire: wire_setfilter). */
int ringcap_setfilter(ringcap_session *s, const char *filter, char *errbuf, size_t errlen);

/* Dump mode: close the current dump file, start the next (libwire: wire_checkpoint). */
int ringcap_checkpoint(ringcap_session *s, char *errbuf, size_t errlen);

/* Asks the daemon to push out what it holds (libwire: wire_flush). The
 * daemon hands partial batches over every 50 ms anyway; this is a round
 * trip that returns once the daemon has handled every earlier request. */
int ringcap_flush(ringcap_session *s, char *errbuf, size_t errlen);

/* Waits up to timeout_ms for packets (libwire: wire_activity): 1 if packets
 * may be ready or the session may have ended, 0 on timeout. There is no
 * descriptor to poll(): the daemon wakes a reader only while it waits here. */
int ringcap_wait(ringcap_session *s, int timeout_ms, char *errbuf, size_t errlen);

/* 1 if the session has ended (its reason into `reason`, may be NULL), 0 if
 * not. Packets delivered before the end can still be read. */
int ringcap_ended(ringcap_session *s, char *reason, size_t reason_len, char *errbuf, size_t errlen);

/* pcap_dispatch: calls handler for the packets there now, at most cnt
 * (cnt <= 0: all), without waiting. Returns how many. */
int ringcap_dispatch(ringcap_session *s, int cnt, ringcap_handler handler, void *user,
                     char *errbuf, size_t errlen);

/* pcap_loop: calls handler for every packet, waiting for more, until cnt
 * packets (cnt <= 0: no limit), the end of the session (every packet
 * delivered before it handed out), or ringcap_breakloop(). Returns how many. */
int ringcap_loop(ringcap_session *s, int cnt, ringcap_handler handler, void *user,
                 char *errbuf, size_t errlen);

/* Makes ringcap_loop()/ringcap_dispatch() return after the current packet.
 * Async-signal-safe (sets a flag). */
void ringcap_breakloop(ringcap_session *s);

/* Batch read without waiting: copies up to max_packets packets, headers into
 * hdrs and bytes back to back into buf (packet i starts at the sum of the
 * caplens before it). Returns how many (0: none now), or
 * RINGCAP_ERR_TOO_SMALL if buf cannot hold the next packet (262144 bytes
 * always can). */
int ringcap_read_batch(ringcap_session *s, ringcap_pkthdr *hdrs, size_t max_packets,
                       uint8_t *buf, size_t buf_len, char *errbuf, size_t errlen);

/* As ringcap_read_batch(), but waits up to timeout_ms when no packet is
 * there, and says when the session is over: returns how many packets (0:
 * none came in time), or RINGCAP_ERR_ENDED once the session has ended and
 * every packet delivered before its end was read. A loop over this call is
 * a whole session, ended the same way as by the command line. */
int ringcap_next_batch(ringcap_session *s, int timeout_ms, ringcap_pkthdr *hdrs,
                       size_t max_packets, uint8_t *buf, size_t buf_len, char *errbuf,
                       size_t errlen);

/* The settings the daemon applied (session, interfaces, grant, snap length,
 * filters, sampling; ", compressed stream" if the daemon compresses it) as
 * text into buf (may be NULL); returns its length. */
int ringcap_describe(ringcap_session *s, char *buf, size_t len);

/* Dump mode: the name of the next dump file the daemon completed, into
 * name; 1 if there was one, 0 if not (fetch it with `ringcap dumps fetch`). */
int ringcap_next_dump(ringcap_session *s, char *name, size_t len, char *errbuf, size_t errlen);

/* Queues n frames to send on the session's interface at their times
 * (libwire: wire_inject), under the grant's [grant.inject] rules: the daemon
 * sets the source addresses, fixes what you may not set, recomputes
 * checksums, checks the grant's filter and token buckets. The library
 * copies the frames (64 per request to the daemon). Every frame gets exactly
 * one report, refused ones too. Returns n, or an error if a batch as a
 * whole was refused (no injection rights): earlier batches stay queued. */
int ringcap_inject(ringcap_session *s, const ringcap_inject_frame *frames, size_t n,
                   char *errbuf, size_t errlen);

/* Copies up to max transmit reports into out, oldest first, asking the
 * daemon when none are held. Returns how many (0: none ready now; poll
 * again, e.g. every few ms, until every frame has its report). */
int ringcap_inject_reports(ringcap_session *s, ringcap_inject_report *out, size_t max,
                           char *errbuf, size_t errlen);

/* The library's version, e.g. "0.1.0" (static). */
const char *ringcap_version(void);

/* A static description of an error code. */
const char *ringcap_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* RINGCAP_H */
