// SPDX-License-Identifier: MIT OR Apache-2.0
/* ringcap's XDP hook, two ways:
 *
 * ringcap_xdp, attached alone: copies the first cfg.copy_len bytes of every
 * frame the driver receives into a BPF ring buffer and returns cfg.verdict
 * (XDP_PASS: the host's traffic is untouched); the filter runs in user
 * space. Used when the filter could not be translated.
 *
 * ringcap_xdp_filtered, reached by tail call from the translated capture
 * filter (crates/hook/src/cbpf.rs), which is what is attached: the filter
 * matched and left its snap length in the scratch record's cap_len; this
 * copies min(snap, length, cfg.copy_len) bytes and returns cfg.verdict:
 * XDP_PASS, or XDP_DROP on a monitor-only interface (the frame never
 * becomes an skb). Frames the filter rejects never get here.
 *
 * Why a copy and not a redirect to an AF_XDP socket: see
 * crates/hook/src/lib.rs. */
#include "common.h"

/* Entry 0: ringcap_xdp_filtered, set by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} progs SEC(".maps");

static __always_inline int copy(struct xdp_md *ctx, struct ringcap_scratch *s,
				__u64 cap, __u64 len, int verdict)
{
	s->hdr.ts_tai_ns = bpf_ktime_get_tai_ns();
	s->hdr.wire_len = len;
	s->hdr.cap_len = cap;
	if (cap > 0 && cap <= RINGCAP_MAX_COPY) {
		if (bpf_xdp_load_bytes(ctx, 0, s->data, cap) != 0) {
			count(RINGCAP_DROPPED);
			return verdict;
		}
	}
	emit(s, cap);
	return verdict;
}

SEC("xdp")
int ringcap_xdp(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct ringcap_scratch *s;
	__u64 len;

	count(RINGCAP_SEEN);
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return cfg.verdict;
	len = bpf_xdp_get_buff_len(ctx);
	return copy(ctx, s, copy_len_of(len), len, cfg.verdict);
}

SEC("xdp")
int ringcap_xdp_filtered(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct ringcap_scratch *s;
	__u64 len, snap;

	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return cfg.verdict;
	len = bpf_xdp_get_buff_len(ctx);
	snap = s->hdr.cap_len;
	if (snap > len)
		snap = len;
	return copy(ctx, s, copy_len_of(snap), len, cfg.verdict);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
