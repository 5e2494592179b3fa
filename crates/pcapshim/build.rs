//! Links libringcap_pcap.so against the system's libpcap (kept even though
//! no symbol of it is referenced at link time): a program that dlopens
//! libpcap gets this library's handle (src/dl.rs), and lookups on it must
//! reach libpcap's functions through this library's dependencies.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,--push-state,--no-as-needed,-lpcap,--pop-state");
}
