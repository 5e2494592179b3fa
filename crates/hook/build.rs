//! Compiles the BPF programs in bpf/ with clang (through libbpf-cargo, which
//! also supplies libbpf's headers) into objects that src/lib.rs embeds.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    // <linux/types.h> includes <asm/types.h>, which Debian keeps under the
    // multiarch directory; -target bpf does not look there by itself.
    let mut args = vec!["-Wall".to_string(), "-Werror".to_string()];
    for dir in [
        "/usr/include/x86_64-linux-gnu",
        "/usr/include/aarch64-linux-gnu",
    ] {
        if Path::new(dir).join("asm/types.h").exists() {
            args.push(format!("-I{dir}"));
        }
    }
    for name in ["xdp", "netfilter"] {
        let src = format!("bpf/{name}.bpf.c");
        libbpf_cargo::SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{name}.bpf.o")))
            .clang_args(&args)
            .build()
            .unwrap_or_else(|e| panic!("building {src} with clang: {e:#}"));
        println!("cargo:rerun-if-changed={src}");
    }
    println!("cargo:rerun-if-changed=bpf/common.h");
    println!("cargo:rerun-if-changed=bpf/record.h");
}
