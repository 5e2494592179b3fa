//! `include/ringcap.h` is written by hand: this checks it against the
//! library. Every `ringcap_*` function the library exports is declared there
//! and nothing else is; every `RINGCAP_*` constant has the library's value;
//! the structs have the library's size and field offsets as the system C
//! compiler lays them out; and the C example compiles warning-free.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn header() -> String {
    std::fs::read_to_string(root().join("include/ringcap.h")).expect("read include/ringcap.h")
}

/// The library's source: every module file under `src/` but this one (the
/// exported functions and constants are spread over them).
fn source() -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("src"))
        .expect("read src/")
        .map(|e| e.expect("src/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .filter(|p| !p.ends_with("tests.rs"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {p:?}: {e}")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Names of the functions declared in the header: `NAME(` at the start of a
/// declaration's name, after a return type.
fn header_functions(h: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in h.lines() {
        let l = line.trim_start();
        // A function-like macro of the library's (ringcap_options_init)
        // declares the exported function of its name for this check.
        if let Some(m) = l.strip_prefix("#define ringcap_") {
            if let Some(j) = m.find('(') {
                if m[..j]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    out.insert(format!("ringcap_{}", &m[..j]));
                }
            }
            continue;
        }
        if l.starts_with('#')
            || l.starts_with('/')
            || l.starts_with('*')
            || l.starts_with("typedef")
        {
            continue;
        }
        if let Some(i) = l.find("ringcap_") {
            if let Some(j) = l[i..].find('(') {
                let name = &l[i..i + j];
                if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    out.insert(name.to_string());
                }
            }
        }
    }
    out
}

fn source_functions(s: &str) -> BTreeSet<String> {
    s.lines()
        .filter_map(|l| l.trim().strip_prefix("pub "))
        .filter_map(|l| {
            l.strip_prefix("unsafe extern \"C\" fn ")
                .or_else(|| l.strip_prefix("extern \"C\" fn "))
        })
        .map(|l| l[..l.find('(').expect("fn (")].to_string())
        .collect()
}

#[test]
fn the_header_declares_exactly_the_exported_functions() {
    let h = header_functions(&header());
    let s = source_functions(&source());
    assert!(s.len() >= 18, "exported functions found: {s:?}");
    assert_eq!(h, s, "ringcap.h's functions vs src/*.rs's");
}

#[test]
fn the_header_constants_have_the_library_values() {
    use crate::*;
    let consts: &[(&str, i64)] = &[
        ("RINGCAP_OK", RINGCAP_OK.into()),
        ("RINGCAP_ERR_ARG", RINGCAP_ERR_ARG.into()),
        ("RINGCAP_ERR_IO", RINGCAP_ERR_IO.into()),
        ("RINGCAP_ERR_REFUSED", RINGCAP_ERR_REFUSED.into()),
        ("RINGCAP_ERR_DAEMON", RINGCAP_ERR_DAEMON.into()),
        ("RINGCAP_ERR_PROTOCOL", RINGCAP_ERR_PROTOCOL.into()),
        ("RINGCAP_ERR_ENDED", RINGCAP_ERR_ENDED.into()),
        ("RINGCAP_ERR_INTERNAL", RINGCAP_ERR_INTERNAL.into()),
        ("RINGCAP_ERR_TOO_SMALL", RINGCAP_ERR_TOO_SMALL.into()),
        ("RINGCAP_ERR_BUSY", RINGCAP_ERR_BUSY.into()),
        ("RINGCAP_FORMAT_PCAP", RINGCAP_FORMAT_PCAP.into()),
        ("RINGCAP_FORMAT_PCAPNG", RINGCAP_FORMAT_PCAPNG.into()),
        ("RINGCAP_INJECT_SENT", RINGCAP_INJECT_SENT.into()),
        ("RINGCAP_INJECT_MISSED", RINGCAP_INJECT_MISSED.into()),
        ("RINGCAP_INJECT_REFUSED", RINGCAP_INJECT_REFUSED.into()),
        ("RINGCAP_INJECT_FAILED", RINGCAP_INJECT_FAILED.into()),
        ("RINGCAP_REASON_SIZE", RINGCAP_REASON_SIZE as i64),
    ];
    let h = header();
    let mut seen = BTreeSet::new();
    for line in h.lines() {
        let mut w = line.split_whitespace();
        if w.next() != Some("#define") {
            continue;
        }
        let (Some(name), Some(value)) = (w.next(), w.next()) else {
            continue;
        };
        // Function-like macros (ringcap_options_init) are checked with the
        // functions.
        if name == "RINGCAP_H" || name == "RINGCAP_ERRBUF_SIZE" || name.contains('(') {
            continue;
        }
        let v: i64 = value
            .trim_matches(|c| c == '(' || c == ')')
            .parse()
            .unwrap_or_else(|_| panic!("#define {name} {value}: not a number"));
        let Some((_, want)) = consts.iter().find(|(n, _)| *n == name) else {
            panic!("ringcap.h defines {name}, which the library does not have");
        };
        assert_eq!(v, *want, "{name}");
        seen.insert(name);
    }
    assert_eq!(seen.len(), consts.len(), "constants in ringcap.h: {seen:?}");
    // Every constant in the source is in the list above.
    let in_source = source()
        .lines()
        .filter(|l| l.starts_with("pub const RINGCAP_"))
        .count();
    assert_eq!(in_source, consts.len());
}

/// Compiles a C program with the system compiler that prints the layout of
/// the header's structs.
#[test]
fn the_structs_have_the_same_layout_in_c_and_rust() {
    use crate::{
        ringcap_inject_frame, ringcap_inject_report, ringcap_options, ringcap_pkthdr, ringcap_stats,
    };
    use std::mem::{offset_of, size_of};
    let dir = std::env::temp_dir().join(format!("ringcap-capi-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("layout.c");
    let fields = [
        "size",
        "snaplen",
        "headers_only",
        "sample_packets",
        "sample_flows",
        "format",
        "count",
        "duration_s",
        "socket_path",
        "interfaces",
        "filter",
        "dump",
        "inject_only",
        "rotate_seconds",
        "rotate_packets",
        "rotate_bytes",
        "compress",
    ];
    let mut c = String::from(
        "#include <ringcap.h>\n#include <stdio.h>\n#include <stddef.h>\nint main(void) {\n",
    );
    c += "printf(\"%zu %zu %zu\\n\", sizeof(ringcap_options), sizeof(ringcap_stats), sizeof(ringcap_pkthdr));\n";
    for f in fields {
        c += &format!("printf(\"%zu\\n\", offsetof(ringcap_options, {f}));\n");
    }
    c += "printf(\"%zu %zu\\n\", offsetof(ringcap_pkthdr, caplen), offsetof(ringcap_pkthdr, wire_len));\n";
    c += "printf(\"%zu\\n\", offsetof(ringcap_stats, bytes_delivered));\n";
    c += "printf(\"%zu %zu %zu %zu\\n\", sizeof(ringcap_inject_frame), offsetof(ringcap_inject_frame, tolerance_ns), offsetof(ringcap_inject_frame, data), offsetof(ringcap_inject_frame, len));\n";
    c += "printf(\"%zu %zu %zu %zu\\n\", sizeof(ringcap_inject_report), offsetof(ringcap_inject_report, sent_ns), offsetof(ringcap_inject_report, status), offsetof(ringcap_inject_report, reason));\nreturn 0; }\n";
    std::fs::write(&src, c).expect("write layout.c");
    let exe = dir.join("layout");
    let st = Command::new("cc")
        .args(["-Wall", "-Werror", "-I"])
        .arg(root().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run cc (scripts/setup installs gcc)");
    assert!(st.success(), "cc failed on layout.c");
    let out = Command::new(&exe).output().expect("run layout");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let nums: Vec<usize> = text
        .split_whitespace()
        .map(|w| w.parse().expect("number"))
        .collect();
    let o = |f: &str| -> usize {
        match f {
            "size" => offset_of!(ringcap_options, size),
            "snaplen" => offset_of!(ringcap_options, snaplen),
            "headers_only" => offset_of!(ringcap_options, headers_only),
            "sample_packets" => offset_of!(ringcap_options, sample_packets),
            "sample_flows" => offset_of!(ringcap_options, sample_flows),
            "format" => offset_of!(ringcap_options, format),
            "count" => offset_of!(ringcap_options, count),
            "duration_s" => offset_of!(ringcap_options, duration_s),
            "socket_path" => offset_of!(ringcap_options, socket_path),
            "interfaces" => offset_of!(ringcap_options, interfaces),
            "filter" => offset_of!(ringcap_options, filter),
            "dump" => offset_of!(ringcap_options, dump),
            "inject_only" => offset_of!(ringcap_options, inject_only),
            "rotate_seconds" => offset_of!(ringcap_options, rotate_seconds),
            "rotate_packets" => offset_of!(ringcap_options, rotate_packets),
            "rotate_bytes" => offset_of!(ringcap_options, rotate_bytes),
            "compress" => offset_of!(ringcap_options, compress),
            _ => unreachable!(),
        }
    };
    let mut want = vec![
        size_of::<ringcap_options>(),
        size_of::<ringcap_stats>(),
        size_of::<ringcap_pkthdr>(),
    ];
    want.extend(fields.iter().map(|f| o(f)));
    want.push(offset_of!(ringcap_pkthdr, caplen));
    want.push(offset_of!(ringcap_pkthdr, wire_len));
    want.push(offset_of!(ringcap_stats, bytes_delivered));
    want.extend([
        size_of::<ringcap_inject_frame>(),
        offset_of!(ringcap_inject_frame, tolerance_ns),
        offset_of!(ringcap_inject_frame, data),
        offset_of!(ringcap_inject_frame, len),
        size_of::<ringcap_inject_report>(),
        offset_of!(ringcap_inject_report, sent_ns),
        offset_of!(ringcap_inject_report, status),
        offset_of!(ringcap_inject_report, reason),
    ]);
    assert_eq!(nums, want, "C layout vs Rust layout");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The library without a daemon: a clear error code and message, no abort.
#[test]
fn errors_are_codes_and_messages() {
    use crate::options::OPTIONS_V1_SIZE;
    use crate::*;
    use std::ffi::CStr;
    let mut err = [0 as std::ffi::c_char; 256];
    let mut s: *mut ringcap_session = std::ptr::null_mut();
    let mut o = std::mem::MaybeUninit::<ringcap_options>::uninit();
    // SAFETY: a writable options struct of that size; init fills every field.
    let mut o = unsafe {
        ringcap_options_init_sized(o.as_mut_ptr(), std::mem::size_of::<ringcap_options>());
        o.assume_init()
    };
    // No interface: an argument error.
    // SAFETY: valid options, out pointer and buffer.
    let rc = unsafe { ringcap_open(&o, &mut s, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, RINGCAP_ERR_ARG);
    // SAFETY: ringcap_open wrote a NUL-terminated message.
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    assert!(msg.contains("interface"), "{msg}");
    // A socket nobody listens on.
    let dir = std::env::temp_dir().join(format!("ringcap-capi-nosock-{}", std::process::id()));
    let sock = std::ffi::CString::new(dir.join("none.sock").to_string_lossy().as_bytes()).unwrap();
    o.socket_path = sock.as_ptr();
    o.interfaces = c"eth0".as_ptr();
    // SAFETY: as above; the strings outlive the call.
    let rc = unsafe { ringcap_open(&o, &mut s, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, RINGCAP_ERR_IO);
    // SAFETY: NUL-terminated message.
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    assert!(msg.contains("cannot reach ringcapd"), "{msg}");
    // A tiny buffer: truncated, still terminated.
    let mut small = [0x55 as std::ffi::c_char; 8];
    // SAFETY: as above, with an 8-byte buffer.
    let rc = unsafe { ringcap_open(&o, &mut s, small.as_mut_ptr(), small.len()) };
    assert_eq!(rc, RINGCAP_ERR_IO);
    assert_eq!(small[7], 0);
    // The first version's size is still accepted (the socket is what fails).
    o.size = OPTIONS_V1_SIZE as u32;
    // SAFETY: as above (the struct is larger than the size says).
    let rc = unsafe { ringcap_open(&o, &mut s, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, RINGCAP_ERR_IO);
    // A size no version had is refused, not read past.
    for bad in [0, 4, OPTIONS_V1_SIZE as u32 - 8, o.size + 4, o.size + 16] {
        o.size = bad;
        // SAFETY: as above.
        let rc = unsafe { ringcap_open(&o, &mut s, err.as_mut_ptr(), err.len()) };
        assert_eq!(rc, RINGCAP_ERR_ARG, "size {bad}");
    }
    o.size = std::mem::size_of::<ringcap_options>() as u32 + 8;
    // SAFETY: as above.
    let rc = unsafe { ringcap_open(&o, &mut s, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, RINGCAP_ERR_ARG);
    // SAFETY: NUL-terminated message.
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    assert!(msg.contains("options.size"), "{msg}");
    // NULL session: an error, not a crash.
    // SAFETY: NULL is handled.
    let rc = unsafe { ringcap_flush(std::ptr::null_mut(), err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, RINGCAP_ERR_ARG);
    assert!(s.is_null());
}

/// The options struct's versions: init writes no more than the caller's
/// struct holds, and a field after the caller's `size` is never read.
#[test]
fn options_of_the_first_version_still_work_and_compress_is_read_only_when_covered() {
    use crate::options::{default_options, read_options, request, OPTIONS_V1_SIZE};
    use crate::*;
    use std::mem::size_of;
    const FULL: usize = size_of::<ringcap_options>();
    // The first version ended with rotate_bytes: its sizeof is where
    // compress starts (96 bytes on 64-bit targets).
    assert_eq!(
        OPTIONS_V1_SIZE,
        std::mem::offset_of!(ringcap_options, rotate_bytes) + 8
    );
    #[cfg(target_pointer_width = "64")]
    assert_eq!(OPTIONS_V1_SIZE, 96);
    const { assert!(FULL > OPTIONS_V1_SIZE) };

    /// An 8-aligned buffer larger than the struct, filled with 0xAA.
    #[repr(C, align(8))]
    struct Buf([u8; 256]);
    let fresh = || Buf([0xAA; 256]);

    // The legacy entry point fills exactly the first version.
    let mut b = fresh();
    // SAFETY: 256 writable, aligned bytes >= the first version's size.
    unsafe { ringcap_options_init(b.0.as_mut_ptr().cast()) };
    assert_eq!(
        u32::from_ne_bytes(b.0[..4].try_into().unwrap()) as usize,
        OPTIONS_V1_SIZE
    );
    assert!(
        b.0[OPTIONS_V1_SIZE..].iter().all(|&x| x == 0xAA),
        "wrote past the first version"
    );
    // The sized one: exactly `size` bytes, `size` set to it.
    for size in [OPTIONS_V1_SIZE, FULL] {
        let mut b = fresh();
        // SAFETY: as above; size <= 256.
        unsafe { ringcap_options_init_sized(b.0.as_mut_ptr().cast(), size) };
        assert_eq!(
            u32::from_ne_bytes(b.0[..4].try_into().unwrap()) as usize,
            size
        );
        assert!(b.0[size..].iter().all(|&x| x == 0xAA), "size {size}");
        assert!(b.0[4..size].iter().all(|&x| x == 0), "size {size}");
    }

    // A first-version caller: whatever follows its struct is not read.
    let mut b = fresh();
    // SAFETY: as above.
    unsafe { ringcap_options_init_sized(b.0.as_mut_ptr().cast(), OPTIONS_V1_SIZE) };
    // SAFETY: the buffer is aligned for and larger than a ringcap_options.
    let o = unsafe { read_options(b.0.as_ptr().cast()) }.unwrap_or_else(|e| panic!("{}", e.msg));
    assert_eq!(o.compress, 0, "read past the caller's size");
    assert_eq!(o.size as usize, OPTIONS_V1_SIZE);
    let mut o = o;
    o.interfaces = c"eth0".as_ptr();
    assert!(
        !request(&o)
            .unwrap_or_else(|e| panic!("{}", e.msg))
            .1
            .compress
    );

    // A current caller asking for compression gets it in the request.
    let mut b = fresh();
    // SAFETY: as above.
    unsafe { ringcap_options_init_sized(b.0.as_mut_ptr().cast(), FULL) };
    // SAFETY: as above: aligned, initialized by init, FULL bytes.
    let mut o = unsafe { std::ptr::read(b.0.as_ptr().cast::<ringcap_options>()) };
    let d = default_options();
    assert_eq!(
        (
            o.size,
            o.snaplen,
            o.headers_only,
            o.sample_packets,
            o.sample_flows
        ),
        (
            d.size,
            d.snaplen,
            d.headers_only,
            d.sample_packets,
            d.sample_flows
        )
    );
    assert_eq!(
        (o.format, o.count, o.duration_s),
        (d.format, d.count, d.duration_s)
    );
    assert!(o.socket_path.is_null() && o.interfaces.is_null() && o.filter.is_null());
    assert_eq!(
        (
            o.dump,
            o.inject_only,
            o.rotate_seconds,
            o.rotate_packets,
            o.rotate_bytes
        ),
        (
            d.dump,
            d.inject_only,
            d.rotate_seconds,
            d.rotate_packets,
            d.rotate_bytes
        )
    );
    assert_eq!(o.compress, 0, "the default");
    o.compress = 1;
    o.interfaces = c"eth0".as_ptr();
    // SAFETY: a whole current struct.
    let o = unsafe { read_options(&o) }.unwrap_or_else(|e| panic!("{}", e.msg));
    assert!(
        request(&o)
            .unwrap_or_else(|e| panic!("{}", e.msg))
            .1
            .compress
    );
}

#[test]
fn the_c_example_compiles_without_warnings() {
    // Compiled only: crates/daemon/tests/capi_example.rs links and runs it.
    let dir = std::env::temp_dir().join(format!("ringcap-capi-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let st = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-c", "-I"])
        .arg(root().join("include"))
        .arg(root().join("../../examples/c/ringcap_example.c"))
        .arg("-o")
        .arg(dir.join("ringcap_example.o"))
        .status()
        .expect("run cc");
    assert!(
        st.success(),
        "cc -Wall -Wextra -Werror failed on the example"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
