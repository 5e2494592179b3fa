//! The XDP hook with its filter in the kernel: the translated capture
//! filter ([`crate::cbpf`]) loaded and attached in front of the capture
//! program of the XDP object, which it reaches by tail call. Kept apart
//! from lib.rs, which loads the objects built by clang.

use crate::{cbpf, raw, runtime, system, HookError};
use libbpf_rs::{MapCore, MapFlags, Object};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// How an XDP hook treats frames beyond copying them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XdpOptions {
    /// libpcap's program for the capture filter, run in the XDP program
    /// (translated, [`cbpf`]): only matching frames are copied, each cut
    /// to the snap length the filter returns. `None`: every frame is
    /// copied (`copy_len` bytes) and the filter runs in user space.
    pub filter: Option<Vec<cbpf::Classic>>,
    /// Monitor-only interface: every frame is dropped at the driver
    /// (`XDP_DROP`) after its copy, matched or not, so the host's stack
    /// never sees the interface's traffic.
    pub monitor: bool,
}

/// `XDP_DROP` and `XDP_PASS`.
pub(crate) const XDP_DROP: u32 = 1;
pub(crate) const XDP_PASS: u32 = 2;

/// Loads the translated `filter` with the capture program of `object`
/// (`ringcap_xdp_filtered`, in its tail-call array) behind it, and
/// attaches it to `ifindex`.
pub(crate) fn attach_filtered(
    object: &Object,
    filter: &[cbpf::Classic],
    monitor: bool,
    ifname: &str,
    ifindex: i32,
) -> Result<(raw::XdpProgram, OwnedFd), HookError> {
    let map = |name: &str| {
        object
            .maps()
            .find(|m| m.name() == name)
            .ok_or_else(|| runtime(format!("the XDP program has no map '{name}'")))
    };
    let progs = map("progs")?;
    let finish = cbpf::Finish::Capture {
        scratch_fd: map("scratch")?.as_fd().as_raw_fd(),
        progs_fd: progs.as_fd().as_raw_fd(),
        counters_fd: map("counters")?.as_fd().as_raw_fd(),
        miss: if monitor { XDP_DROP } else { XDP_PASS },
    };
    let insns = cbpf::translate(filter, finish)
        .map_err(|e| runtime(format!("translating the capture filter to eBPF: {e}")))?;
    let prog = raw::XdpProgram::load("ringcap_filter", &insns).map_err(|(e, log)| {
        if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) && log.is_empty() {
            return system(
                "permission denied while loading the XDP filter: BPF capture hooks need CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN); run as root".into(),
            );
        }
        runtime(format!(
            "the kernel refused the capture filter translated to eBPF ({e}); the verifier said:\n{log}"
        ))
    })?;
    let capture = object
        .progs()
        .find(|p| p.name() == "ringcap_xdp_filtered")
        .ok_or_else(|| runtime("the XDP object has no program ringcap_xdp_filtered".into()))?;
    let fd = capture.as_fd().as_raw_fd() as u32;
    progs
        .update(&0u32.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
        .map_err(|e| {
            runtime(format!(
                "chaining the XDP filter to the capture program: {e:#}"
            ))
        })?;
    let link = prog.attach(ifindex).map_err(|e| match e.raw_os_error() {
        Some(libc::EBUSY | libc::EEXIST) => system(format!(
            "attaching the XDP program to {ifname}: another XDP program is attached to {ifname} (see `ip link show {ifname}`); ringcap does not replace it ({e})"
        )),
        Some(libc::EOPNOTSUPP | libc::EINVAL) => system(format!(
            "attaching the XDP program to {ifname}: the driver of {ifname} (or the kernel) does not support XDP programs ({e})"
        )),
        Some(libc::EPERM | libc::EACCES) => system(format!(
            "permission denied while attaching the XDP program to {ifname}: run as root ({e})"
        )),
        _ => runtime(format!("attaching the XDP program to {ifname}: {e}")),
    })?;
    Ok((prog, link))
}
