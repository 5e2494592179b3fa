// SPDX-License-Identifier: MIT OR Apache-2.0
/* ringcap's XDP hook: copies the first cfg.copy_len bytes of every frame the
 * driver receives into a BPF ring buffer and passes the frame on (XDP_PASS),
 * so the host's traffic is untouched: capture, not interception. Why a copy
 * and not a redirect to an AF_XDP socket: see crates/hook/src/lib.rs. */
#include "common.h"

SEC("xdp")
int ringcap_xdp(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct ringcap_scratch *s;
	__u64 len, cap;

	count(RINGCAP_SEEN);
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return XDP_PASS;
	len = bpf_xdp_get_buff_len(ctx);
	cap = copy_len_of(len);
	s->hdr.ts_tai_ns = bpf_ktime_get_tai_ns();
	s->hdr.wire_len = len;
	s->hdr.cap_len = cap;
	if (cap > 0 && cap <= RINGCAP_MAX_COPY) {
		if (bpf_xdp_load_bytes(ctx, 0, s->data, cap) != 0) {
			count(RINGCAP_DROPPED);
			return XDP_PASS;
		}
	}
	emit(s, cap);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
