//! Publishing an index never writes through a name planted beforehand: in a
//! directory others can write (a capture into /tmp as root), a symlink at
//! the index's temporary name must be refused, not followed.

use ringcap_index::{build_index, index_path};
use ringcap_testkit::TempDir;
use std::os::unix::fs::symlink;

/// A pcap file with one 60-byte Ethernet frame.
fn one_packet_pcap() -> Vec<u8> {
    let mut b = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    for v in [0u32, 0, 65535, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for v in [1_700_000_000u32, 0, 60, 60] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&[0u8; 60]);
    b
}

#[test]
fn a_symlink_at_the_temporary_name_is_not_followed() {
    let dir = TempDir::new("index-publish");
    let capture = dir.join("c.pcap");
    std::fs::write(&capture, one_packet_pcap()).expect("write capture");
    let victim = dir.join("victim");
    std::fs::write(&victim, b"victim").expect("write victim");
    let index = index_path(&capture);
    let name = index
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let tmp = index.with_file_name(format!("{name}.tmp{}", std::process::id()));
    symlink(&victim, &tmp).expect("plant symlink");

    let r = build_index(&capture);
    assert!(
        r.is_err(),
        "the index was published through a planted name: {r:?}"
    );
    assert_eq!(std::fs::read(&victim).expect("victim"), b"victim");
    assert!(
        std::fs::symlink_metadata(&tmp).is_ok(),
        "the planted name was removed"
    );
    assert!(!index.exists(), "an index was published");

    // Without the planted name the same file is indexed.
    std::fs::remove_file(&tmp).expect("remove symlink");
    let report = build_index(&capture).expect("index");
    assert_eq!(report.packets, 1);
}

/// An index is stale once its capture is modified after it was read, even
/// in place, at the same length and past the first bytes the index checks
/// (a same-length edit 100 KB in was not seen, and queries missed what the
/// edit put there).
#[test]
fn an_edit_in_place_past_the_head_makes_the_index_stale() {
    use ringcap_index::{load_index, Unusable};
    let dir = TempDir::new("index-stale");
    let capture = dir.join("c.pcap");
    let mut bytes = one_packet_pcap();
    let record = bytes[24..].to_vec();
    for _ in 0..200 {
        bytes.extend_from_slice(&record);
    }
    std::fs::write(&capture, &bytes).expect("write capture");
    build_index(&capture).expect("index");
    assert!(load_index(&capture).is_ok(), "a fresh index is used");
    // File times tick with the kernel's coarse clock (a few ms).
    std::thread::sleep(std::time::Duration::from_millis(20));
    let at = bytes.len() - 100;
    assert!(at > 4096);
    bytes[at] ^= 0xff;
    std::fs::write(&capture, &bytes).expect("edit capture");
    assert!(
        matches!(load_index(&capture), Err(Unusable::Stale)),
        "an index older than its capture's last change is stale"
    );
    // Rebuilt, it is used again.
    build_index(&capture).expect("index again");
    assert!(load_index(&capture).is_ok());
}
