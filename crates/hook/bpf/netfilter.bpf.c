// SPDX-License-Identifier: MIT OR Apache-2.0
/* ringcap's netfilter hook: attached at NF_INET_PRE_ROUTING for IPv4 and
 * IPv6, it copies the first cfg.copy_len bytes of each IP packet that
 * arrives on interface cfg.ifindex into a BPF ring buffer and accepts it.
 * The packet starts at its IP header (no link-layer header is left at this
 * point): the records are LINKTYPE_RAW. It sees only what the host's IP
 * layer takes in: packets for this host (or to be routed), after the IP
 * header checks, never frames for other hosts (no promiscuous traffic). */
#include "common.h"

#define NF_ACCEPT 1

/* The kernel's types, as far as this program reads them (CO-RE relocates
 * the field offsets against the running kernel's BTF). */
struct net_device {
	int ifindex;
} __attribute__((preserve_access_index));

struct nf_hook_state {
	struct net_device *in;
} __attribute__((preserve_access_index));

struct sk_buff {
	unsigned int len;
} __attribute__((preserve_access_index));

struct bpf_nf_ctx {
	const struct nf_hook_state *state;
	struct sk_buff *skb;
};

extern int bpf_dynptr_from_skb(struct __sk_buff *skb, __u64 flags,
			       struct bpf_dynptr *ptr__uninit) __ksym;

SEC("netfilter")
int ringcap_netfilter(struct bpf_nf_ctx *ctx)
{
	const struct nf_hook_state *state = ctx->state;
	struct sk_buff *skb = ctx->skb;
	struct net_device *in = state->in;
	struct bpf_dynptr ptr;
	__u32 zero = 0;
	struct ringcap_scratch *s;
	__u64 len, cap;

	if (!in || in->ifindex != (int)cfg.ifindex)
		return NF_ACCEPT;
	count(RINGCAP_SEEN);
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return NF_ACCEPT;
	if (bpf_dynptr_from_skb((struct __sk_buff *)skb, 0, &ptr) != 0) {
		count(RINGCAP_DROPPED);
		return NF_ACCEPT;
	}
	len = skb->len;
	cap = copy_len_of(len);
	s->hdr.ts_tai_ns = bpf_ktime_get_tai_ns();
	s->hdr.wire_len = len;
	s->hdr.cap_len = cap;
	if (cap > 0 && cap <= RINGCAP_MAX_COPY) {
		if (bpf_dynptr_read(s->data, cap, &ptr, 0, 0) != 0) {
			count(RINGCAP_DROPPED);
			return NF_ACCEPT;
		}
	}
	emit(s, cap);
	return NF_ACCEPT;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
