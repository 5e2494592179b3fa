/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* Maps and helpers shared by the XDP and netfilter capture programs. */
#ifndef RINGCAP_COMMON_H
#define RINGCAP_COMMON_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "record.h"

/* Records for user space; its size is set by the loader (-B). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} ring SEC(".maps");

/* One packet's record under construction, per CPU (too big for the stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ringcap_scratch);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RINGCAP_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Set by the loader before the program is loaded (read-only afterwards). */
struct ringcap_config {
	/* Bytes to copy of each packet: the snap length, or more when the
	 * user-space filter reads further (crates/hook/src/lib.rs). */
	__u32 copy_len;
	/* Interface to capture on (netfilter hooks see every interface). */
	__u32 ifindex;
	/* XDP: what happens to a frame after its copy, XDP_PASS (2) or, on a
	 * monitor-only interface, XDP_DROP (1). */
	__u32 verdict;
};
const volatile struct ringcap_config cfg = { .copy_len = 65535, .ifindex = 0, .verdict = 2 };

static __always_inline void count(__u32 index)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &index);
	if (c)
		*c += 1;
}

/* How many bytes of a packet of `len` bytes to copy, in [0, RINGCAP_MAX_COPY].
 * clang 14 otherwise loses the bound between the check and the helper call:
 * the empty asm keeps the value in one register the verifier tracks. */
static __always_inline __u64 copy_len_of(__u64 len)
{
	__u64 cap = len;
	if (cap > cfg.copy_len)
		cap = cfg.copy_len;
	asm volatile("" : "+r"(cap));
	if (cap > RINGCAP_MAX_COPY)
		cap = RINGCAP_MAX_COPY;
	return cap;
}

/* Hands the scratch record with `cap` bytes of data to user space.
 * BPF_RB_NO_WAKEUP: user space reads in batches on its own schedule, so no
 * wakeup per record (which cost 5x in throughput). */
static __always_inline void emit(struct ringcap_scratch *s, __u64 cap)
{
	asm volatile("" : "+r"(cap));
	if (cap > RINGCAP_MAX_COPY)
		return;
	if (bpf_ringbuf_output(&ring, s, sizeof(s->hdr) + cap, BPF_RB_NO_WAKEUP) == 0)
		count(RINGCAP_DELIVERED);
	else
		count(RINGCAP_DROPPED);
}

#endif
