//! ringcap-testkit: support library for ringcap's integration tests that capture
//! real packets.
//!
//! * [`Testbed`] ([`netns`]): two network namespaces joined by a veth pair, torn
//!   down on drop; [`Testbed::send_from_peer`] replays frames with tcpreplay.
//! * [`frames`]: Ethernet frames of many shapes, each tagged with a sequence number
//!   ([`frames::seq_of`]), and [`frames::mixed_sequence`].
//! * [`capture`]: an independent pcap/pcapng reader, tcpdump as a filter oracle,
//!   locating the `ringcap` binary, child-process guards and stderr watching.
//! * [`TempDir`] and [`TempFile`] ([`tempdir`]): temporary directories and files
//!   under cargo's `target/tmp`, removed on drop.
//! * [`skip()`] ([`skip`](mod@skip)): how a test that cannot run here skips, and
//!   why it fails instead when `RINGCAP_REQUIRE_PRIVILEGED_TESTS=1` (as in CI).
//!
//! Traffic rules kept here: frames are only ever sent on veth pairs between
//! namespaces this crate created; MACs are locally administered (`02:...`), IPv4
//! addresses come from 198.18.0.0/15 and IPv6 from fd00::/8; sends are bounded in
//! count ([`netns::MAX_SEND_FRAMES`]) and time.
//!
//! A typical test:
//!
//! ```no_run
//! use ringcap_testkit::{capture, frames, skip_unless_netns, TempDir, Testbed};
//! # fn main() -> std::io::Result<()> {
//! skip_unless_netns!(Ok(()));
//! let tb = Testbed::new()?;
//! let sent = frames::mixed_sequence(&tb.endpoints(), 100);
//! let dir = TempDir::new("example");
//! let out = dir.join("example.pcap");
//! let td = capture::start_tcpdump(&tb, &out, Some(100), "")?;
//! tb.send_from_peer(&sent, 10_000)?;
//! td.finish(std::time::Duration::from_secs(10))?;
//! let got = capture::read_pcap(&out)?;
//! assert_eq!(got.len(), 100);
//! # Ok(())
//! # }
//! ```

pub mod capture;
pub mod child;
pub mod frames;
pub mod netns;
pub mod oracle;
pub mod skip;
pub mod tempdir;

pub use capture::{
    read_pcap, ringcap_bin, tcpdump_count, tcpdump_filter_ok, wait_for_stderr_line, CapturedPacket,
    ChildGuard, StderrLog,
};
pub use netns::{netns_skip_reason, Testbed, TestbedOptions};
pub use skip::{skip, REQUIRE_ENV};
pub use tempdir::{TempDir, TempFile};

/// Returns early from the calling test (with the given value, `()` by default)
/// after [`skip()`] (which prints `SKIP: <reason>`, or panics when
/// `RINGCAP_REQUIRE_PRIVILEGED_TESTS=1`) when network-namespace tests cannot run
/// here.
#[macro_export]
macro_rules! skip_unless_netns {
    () => {
        $crate::skip_unless_netns!(())
    };
    ($ret:expr) => {
        if let Some(reason) = $crate::netns_skip_reason() {
            $crate::skip(reason);
            return $ret;
        }
    };
}
