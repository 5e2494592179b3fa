//! The stages between the source and the sink: filter, sample, rate limit,
//! truncate, transform.
//!
//! Live captures run as much of this as possible inside the kernel: the filter,
//! the snap length and the random and per-flow samplers are one classic BPF
//! program attached to the capture socket, so packets that are not wanted never
//! cost a copy to user space. What the kernel cannot do (exact header-length
//! truncation, every-Nth sampling) runs in user space on the capture thread, and
//! offline captures run everything in user space with the same semantics.

pub mod bpf;
pub mod filter;
pub mod names;
pub mod rate;
pub mod sample;
pub mod session;
pub mod transform;
pub mod truncate;

pub use bpf::{CheckedProgram, Instruction, Program, MAX_INSTRUCTIONS};
pub use filter::{compile, FilterError};
pub use rate::{Limits, Over, TokenBucket};
pub use sample::{SampleMode, Sampling, UserSampler};
pub use session::{Exclude, SessionFilter};
pub use transform::{Transform, TransformFactory};
pub use truncate::Snap;
