//! Links libpcap statically when `scripts/build-libpcap` has built it (as
//! `scripts/setup` does): Debian's libpcap.so brings libdbus-1 and through
//! it libsystemd, libcap, libgcrypt, libgpg-error, liblzma, libzstd and
//! liblz4, which every start of a command run as root mapped for a capture
//! backend ringcap never opens, and which a query with a cold page cache
//! read from disk first (~11-16 ms of 75-95: bench/README, 2026-11-29).
//! The archive is the same libpcap version as Debian's (1.10.3), so filters
//! compile to the same programs as tcpdump's.
//!
//! The directory is searched before the system's, so the pcap crate's
//! `-lpcap` finds the archive; without it the system's libpcap.so is linked
//! as before. Only this package does it: libringcap_pcap.so must keep the
//! system's libpcap, whose functions it stands in front of (ringcapd links
//! no libpcap).
fn main() {
    let dir = std::env::var("RINGCAP_LIBPCAP_DIR")
        .unwrap_or_else(|_| "/usr/local/lib/ringcap-libpcap/lib".to_string());
    println!("cargo:rerun-if-env-changed=RINGCAP_LIBPCAP_DIR");
    let archive = std::path::Path::new(&dir).join("libpcap.a");
    if archive.is_file() {
        println!("cargo:rerun-if-changed={}", archive.display());
        println!("cargo:rustc-link-search=native={dir}");
    } else {
        // Watching a file that is not there would make cargo rebuild this
        // package every time. An archive built later is taken after
        // `cargo clean -p ringcap` (scripts/setup builds it first).
        println!("cargo:rerun-if-changed=build.rs");
    }
}
