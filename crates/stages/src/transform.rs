//! The transform slot: in-place rewrites of each kept packet, after filter,
//! sample and truncate and before the packet is encoded for its sink (field
//! masks and address anonymization go here). A transform sees exactly the
//! bytes that will be kept and may change them but not their length.
//!
//! Each capture thread owns its own transform instances (a cache of recent
//! translations, say, needs no lock), made by a [`TransformFactory`]. A capture
//! without transforms runs none of this.

use std::sync::Arc;

/// An in-place rewrite of kept packets.
pub trait Transform: Send {
    /// Rewrites `frame`, the kept bytes of a packet of link type `linktype`
    /// (LINKTYPE_*) that was `wire_len` bytes long on the wire. `frame` may
    /// end anywhere, even inside a header: a transform must check lengths.
    fn apply(&mut self, linktype: u32, frame: &mut [u8], wire_len: u32);

    /// A hint: `frame` (link type `linktype`) will be given to
    /// [`apply`](Self::apply) a few packets from now. A transform whose
    /// work waits on memory (a large translation table) can start loading
    /// what that frame needs, so the loads overlap the packets in between.
    /// Must not change what `apply` computes; by default nothing.
    #[inline]
    fn prepare(&mut self, _linktype: u32, _frame: &[u8]) {}
}

/// Makes one [`Transform`] for each capture thread.
pub type TransformFactory = Arc<dyn Fn() -> Box<dyn Transform> + Send + Sync>;

/// Shows `chain` a frame it will be given a few packets from now
/// ([`Transform::prepare`]).
#[inline]
pub fn prepare_all(chain: &mut [Box<dyn Transform>], linktype: u32, frame: &[u8]) {
    for t in chain {
        t.prepare(linktype, frame);
    }
}

/// Runs `chain` on one frame, in order.
#[inline]
pub fn apply_all(chain: &mut [Box<dyn Transform>], linktype: u32, frame: &mut [u8], wire_len: u32) {
    for t in chain {
        t.apply(linktype, frame, wire_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Xor(u8);
    impl Transform for Xor {
        fn apply(&mut self, _: u32, frame: &mut [u8], _: u32) {
            for b in frame {
                *b ^= self.0;
            }
        }
    }

    #[test]
    fn chain_runs_in_order() {
        let mut chain: Vec<Box<dyn Transform>> = vec![Box::new(Xor(0x0f)), Box::new(Xor(0xff))];
        let mut f = [0x00u8, 0x12];
        apply_all(&mut chain, 1, &mut f, 2);
        assert_eq!(f, [0xf0, 0xe2]);
    }
}
