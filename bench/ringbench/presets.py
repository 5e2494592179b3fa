"""The presets (--tiny, --quick, --full): what each phase measures and how much.
"""




PRESETS = {
    "tiny": dict(
        sizes=[64],
        # (frame size, snaplen, mode) combinations
        combos=[(64, 64, "disk"), (64, 64, "stress")],
        tools=["tcpdump", "dumpcap", "ringcap", "ringcap-zc"],
        reps=1, count=5000, rate_pps=None,
        capacity_count=5000, idle_seconds=0.3,
        quota_tools=["tcpdump"], quotas=[20], quota_seconds=0.5, quota_max_count=20000,
        quota_max_seconds=1, ring_factor=0,
        offline_mb=4, storage_mb=16,
        daemon_clients=2, daemon_count=5000, clients_count=5000, clients_rounds=1,
        privacy_packets=20000, privacy_flows=2000,
        privacy_addr_packets=20000, privacy_addr_flows=2000,
        compress_packets=6000,
        inject_frames=1000,
        hooks_sizes=[64], hooks_count=5000, hooks_rate=20000, hooks_reps=1,
        retrieval_sizes=[64], retrieval_count=5000, retrieval_reps=1,
        retrieval_mb=20, retrieval_files=4, retrieval_flows=100000,
    ),
    "quick": dict(
        sizes=[64, 1500],
        combos=[(64, 64, "disk"), (64, 64, "count"), (1500, 65535, "disk")],
        tools=["tcpdump", "dumpcap", "netsniff-ng", "stenotype", "ringcap", "ringcap-t2"],
        reps=3, count=300000, rate_pps=None,
        capacity_count=500000, idle_seconds=1,
        # ringcap's default ring (256 MiB) would hold most of a 10 s run, so the
        # quick quota phase runs it with tcpdump's ring size (-B 2); --full
        # runs every tool with its default ring and runs long enough.
        quota_tools=["tcpdump", "ringcap-B2"], quotas=[10, 5, 2, 1], quota_seconds=6,
        quota_max_count=None, quota_max_seconds=6, ring_factor=10,
        offline_mb=200, storage_mb=256,
        daemon_clients=12, daemon_count=300000, clients_count=1000000,
        privacy_packets=2000000, privacy_flows=16384,
        # issue 30: 200,000 distinct addresses in 2 M packets
        privacy_addr_packets=2000000, privacy_addr_flows=100000,
        compress_packets=300000,
        inject_frames=10000,
        hooks_sizes=[64, 1500], hooks_count=300000, hooks_rate=50000, hooks_reps=3,
        retrieval_sizes=[64, 1500], retrieval_count=300000, retrieval_reps=3,
        retrieval_mb=1000, retrieval_files=10, retrieval_flows=100000,
    ),
    "full": dict(
        sizes=[64, 256, 1500, "imix"],
        combos=None,  # every size x snaplen x mode
        tools=["tcpdump", "tcpdump-B", "dumpcap", "netsniff-ng", "stenotype",
               "ringcap", "ringcap-t2"],
        reps=5, count=2000000, rate_pps=None,
        capacity_count=2000000, idle_seconds=3,
        quota_tools=None,  # every tool, plus ringcap-B2
        quotas=[20, 10, 5, 2, 1], quota_seconds=15, quota_max_count=None,
        quota_max_seconds=90, ring_factor=10,
        offline_mb=3000, storage_mb=4096,
        privacy_packets=10000000, privacy_flows=65536,
        privacy_addr_packets=2000000, privacy_addr_flows=100000,
        compress_packets=2000000,
        inject_frames=60000,
        hooks_sizes=[64, 1500], hooks_count=2000000, hooks_rate=50000, hooks_reps=5,
        retrieval_sizes=[64, 1500], retrieval_count=2000000, retrieval_reps=5,
        retrieval_mb=10000, retrieval_files=40, retrieval_flows=100000,
    ),
}
