//! An XDP program loaded from instructions this process wrote (the
//! translated filter, [`crate::cbpf`]), through libbpf's low-level calls:
//! load, test run (BPF_PROG_TEST_RUN), attach with a BPF link. The only
//! unsafe code for it; everything is owned descriptors afterwards.

use crate::ebpf::Insn;
use libbpf_rs::libbpf_sys as sys;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Bytes of verifier log kept when a load fails.
const LOG_BYTES: usize = 1 << 20;

/// A loaded XDP program (not attached).
pub struct XdpProgram {
    fd: OwnedFd,
}

fn os_error(ret: i32) -> io::Error {
    // libbpf 1.x returns -errno (and sets errno).
    io::Error::from_raw_os_error(if ret < 0 { -ret } else { libc::EINVAL })
}

impl XdpProgram {
    /// Loads `insns` as an XDP program named `name`. On failure, the error
    /// and the verifier's log (its tail).
    pub fn load(name: &str, insns: &[Insn]) -> Result<XdpProgram, (io::Error, String)> {
        let words: Vec<u64> = insns.iter().map(|i| i.to_u64()).collect();
        let name =
            CString::new(name).map_err(|_| (io::ErrorKind::InvalidInput.into(), String::new()))?;
        let license = c"Dual MIT/GPL";
        let mut log = vec![0u8; LOG_BYTES];
        let mut tries = [false, true].into_iter();
        loop {
            let with_log = tries.next().unwrap_or(true);
            let mut opts = sys::bpf_prog_load_opts {
                sz: std::mem::size_of::<sys::bpf_prog_load_opts>() as _,
                expected_attach_type: sys::BPF_XDP,
                ..Default::default()
            };
            if with_log {
                opts.log_level = 1;
                opts.log_size = log.len() as u32;
                opts.log_buf = log.as_mut_ptr().cast();
            }
            // SAFETY: `words` holds insns.len() instructions in `struct
            // bpf_insn` layout (8 bytes each, ebpf::Insn::to_bytes); the
            // name and license are NUL-terminated; opts is a valid, sized
            // bpf_prog_load_opts whose log buffer (when set) is `log`,
            // alive and writable for log_size bytes during the call.
            let fd = unsafe {
                sys::bpf_prog_load(
                    sys::BPF_PROG_TYPE_XDP,
                    name.as_ptr(),
                    license.as_ptr(),
                    words.as_ptr().cast(),
                    words.len() as _,
                    &mut opts,
                )
            };
            if fd >= 0 {
                // SAFETY: bpf_prog_load returned a new descriptor we own.
                return Ok(XdpProgram {
                    fd: unsafe { OwnedFd::from_raw_fd(fd) },
                });
            }
            let err = os_error(fd);
            if with_log || err.raw_os_error() == Some(libc::EPERM) {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let text = String::from_utf8_lossy(&log[..end]);
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(12)..].join("\n");
                return Err((err, tail));
            }
        }
    }

    /// The program's descriptor.
    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Runs the program once in the kernel on a frame holding `data`
    /// (BPF_PROG_TEST_RUN; at least 14 bytes) and returns its value.
    pub fn test_run(&self, data: &[u8]) -> io::Result<u32> {
        let mut opts = sys::bpf_test_run_opts {
            sz: std::mem::size_of::<sys::bpf_test_run_opts>() as _,
            data_in: data.as_ptr().cast(),
            data_size_in: u32::try_from(data.len())
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
            repeat: 1,
            ..Default::default()
        };
        // SAFETY: opts is a valid, sized bpf_test_run_opts; data_in points
        // at data_size_in readable bytes for the call; no output buffers.
        let ret = unsafe { sys::bpf_prog_test_run_opts(self.fd.as_raw_fd(), &mut opts) };
        if ret < 0 {
            return Err(os_error(ret));
        }
        Ok(opts.retval)
    }

    /// Attaches the program to interface `ifindex` with a BPF link (gone
    /// when the returned descriptor closes, with the process).
    pub fn attach(&self, ifindex: i32) -> io::Result<OwnedFd> {
        // SAFETY: plain call with two descriptors and no options (NULL).
        let fd = unsafe {
            sys::bpf_link_create(self.fd.as_raw_fd(), ifindex, sys::BPF_XDP, std::ptr::null())
        };
        if fd < 0 {
            return Err(os_error(fd));
        }
        // SAFETY: bpf_link_create returned a new descriptor we own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}
