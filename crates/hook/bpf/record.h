/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* What the capture programs share with user space (crates/hook/src/ring.rs):
 * one ring buffer record per packet, and the counters. */
#ifndef RINGCAP_RECORD_H
#define RINGCAP_RECORD_H

#include <linux/types.h>

/* Most bytes copied of one packet: the per-CPU scratch value must stay
 * below the kernel's per-CPU allocation unit (32 KiB). */
#define RINGCAP_MAX_COPY 16384

/* Indexes into the counters map (per CPU, summed by user space). */
#define RINGCAP_SEEN 0      /* packets the program ran on */
#define RINGCAP_DELIVERED 1 /* records written into the ring buffer */
#define RINGCAP_DROPPED 2   /* ring buffer full: no record */
#define RINGCAP_COUNTERS 3

struct ringcap_record {
	__u64 ts_tai_ns;  /* bpf_ktime_get_tai_ns() */
	__u32 wire_len;   /* the packet's whole length */
	__u32 cap_len;    /* bytes that follow */
};

struct ringcap_scratch {
	struct ringcap_record hdr;
	__u8 data[RINGCAP_MAX_COPY];
};

#endif
